/* SPDX-License-Identifier: GPL-2.0 */
/*
 * compat.h - every difference between kernels the driver cares about.
 *
 * Nothing here tests a version number: distribution kernels backport, so
 * each difference is found in what the kernel offers.  A macro the headers
 * define is tested with #ifdef; a declaration is probed in the headers by
 * Kbuild, which passes VB_HAVE_<name> when it finds it.  The rest of the
 * driver uses the helpers below.  mm's internals, which no helper can
 * hide, are read in one place, vb_mm.c.  Supported: Linux 6.1 (Debian 12),
 * 6.12 (Debian 13) and 7.3 (trixie-backports).
 */
#ifndef VB_COMPAT_H
#define VB_COMPAT_H

#include <linux/mmzone.h>
#include <linux/mm.h>
#include <linux/log2.h>
#include <linux/shrinker.h>
#include <linux/page_reporting.h>
#include <linux/virtio_config.h>

/*
 * Largest buddy order.  MAX_ORDER was exclusive, then inclusive, then
 * renamed MAX_PAGE_ORDER; MAX_ORDER_NR_PAGES, the pages of a block of the
 * largest order, kept its meaning through all of it.
 */
#ifdef MAX_PAGE_ORDER
#define VB_MAX_BUDDY_ORDER	MAX_PAGE_ORDER
#else
#define VB_MAX_BUDDY_ORDER	ilog2(MAX_ORDER_NR_PAGES)
#endif

/*
 * Shrinker: an embedded struct registered with a name, or one allocated
 * with shrinker_alloc() (VB_HAVE_SHRINKER_ALLOC).  Callers embed a struct
 * vb_compat_shrinker.
 */
typedef unsigned long (*vb_shrink_fn)(struct shrinker *,
				     struct shrink_control *);

#ifdef VB_HAVE_SHRINKER_ALLOC
struct vb_compat_shrinker {
	struct shrinker *s;
};

static inline int vb_compat_shrinker_register(struct vb_compat_shrinker *cs,
					      vb_shrink_fn count,
					      vb_shrink_fn scan,
					      void *priv, const char *name)
{
	cs->s = shrinker_alloc(0, "%s", name);
	if (!cs->s)
		return -ENOMEM;
	cs->s->count_objects = count;
	cs->s->scan_objects = scan;
	cs->s->private_data = priv;
	shrinker_register(cs->s);
	return 0;
}

static inline void vb_compat_shrinker_unregister(struct vb_compat_shrinker *cs)
{
	shrinker_free(cs->s);
	cs->s = NULL;
}

static inline void *vb_compat_shrinker_priv(struct shrinker *s)
{
	return s->private_data;
}
#else
struct vb_compat_shrinker {
	struct shrinker s;
	void *priv;
};

static inline int vb_compat_shrinker_register(struct vb_compat_shrinker *cs,
					      vb_shrink_fn count,
					      vb_shrink_fn scan,
					      void *priv, const char *name)
{
	cs->s.count_objects = count;
	cs->s.scan_objects = scan;
	cs->s.seeks = DEFAULT_SEEKS;
	cs->priv = priv;
	return register_shrinker(&cs->s, "%s", name);
}

static inline void vb_compat_shrinker_unregister(struct vb_compat_shrinker *cs)
{
	unregister_shrinker(&cs->s);
}

static inline void *vb_compat_shrinker_priv(struct shrinker *s)
{
	return container_of(s, struct vb_compat_shrinker, s)->priv;
}
#endif

/*
 * virtio_find_vqs(): parallel arrays of callbacks and names, or one array
 * of struct virtqueue_info (VB_HAVE_VIRTQUEUE_INFO).  A NULL name takes no
 * queue index in both forms.
 */
#define VB_COMPAT_MAX_VQS	8

static inline int vb_compat_find_vqs(struct virtio_device *vdev,
				     unsigned int nvqs,
				     struct virtqueue *vqs[],
				     vq_callback_t *callbacks[],
				     const char *names[])
{
#ifdef VB_HAVE_VIRTQUEUE_INFO
	struct virtqueue_info info[VB_COMPAT_MAX_VQS] = {};
	unsigned int i;

	if (WARN_ON(nvqs > VB_COMPAT_MAX_VQS))
		return -EINVAL;
	for (i = 0; i < nvqs; i++) {
		info[i].name = names[i];
		info[i].callback = callbacks[i];
	}
	return virtio_find_vqs(vdev, nvqs, vqs, info, NULL);
#else
	return virtio_find_vqs(vdev, nvqs, vqs, callbacks, names, NULL);
#endif
}

/*
 * Balloon pages.  The common code was <linux/balloon_compaction.h>, its
 * migration CONFIG_BALLOON_COMPACTION; it became <linux/balloon.h>
 * (VB_HAVE_BALLOON_H) and CONFIG_BALLOON_MIGRATION.  VB_BALLOON_MIGRATION:
 * compaction may move inflated pages, through bdev_info.migratepage.
 *
 * Who keeps the books (VB_HAVE_BALLOON_CORE_ACCOUNTS): the driver did -
 * adjust_managed_page_count() on inflate, deflate and a migration across
 * zones, and on migration the reference of the new page, its insertion
 * and the release of the old one - until balloon_dev_info got
 * adjust_managed_page_count; from then on the common code does all of it
 * and the migration callback only tells the host (returns 0, or -ENOENT
 * when the old page was deflated without the new one inflated).
 */
/*
 * A workqueue is per-CPU or unbound.  Per-CPU was the default until
 * WQ_PERCPU (VB_HAVE_WQ_PERCPU) made it a flag that alloc_workqueue()
 * warns about when neither it nor WQ_UNBOUND is given.
 */
#ifdef VB_HAVE_WQ_PERCPU
#define VB_WQ_PERCPU	WQ_PERCPU
#else
#define VB_WQ_PERCPU	0
#endif

#ifdef VB_HAVE_BALLOON_H
#include <linux/balloon.h>
#else
#include <linux/balloon_compaction.h>
#endif
#if defined(CONFIG_BALLOON_COMPACTION) || defined(CONFIG_BALLOON_MIGRATION)
#define VB_BALLOON_MIGRATION
#endif
#ifdef MIGRATEPAGE_SUCCESS
#define VB_COMPAT_MIGRATE_SUCCESS	MIGRATEPAGE_SUCCESS
#else
#define VB_COMPAT_MIGRATE_SUCCESS	0
#endif

#endif /* VB_COMPAT_H */
