/* SPDX-License-Identifier: GPL-2.0 */
/*
 * compat.h - every kernel-version difference the driver cares about.
 *
 * VB_KVER_NUM is passed by Kbuild as (VERSION << 16) + (PATCHLEVEL << 8) of
 * the kernel we build against, so 6.1 is 0x060100.  The rest of the driver
 * never tests a version; it uses the helpers below.  Supported: Linux 6.1
 * (Debian 12) and 6.12 (Debian 13, bookworm-backports).
 */
#ifndef VB_COMPAT_H
#define VB_COMPAT_H

#include <linux/mmzone.h>
#include <linux/mm.h>
#include <linux/shrinker.h>
#include <linux/page_reporting.h>
#include <linux/virtio_config.h>

#ifndef VB_KVER_NUM
#error "VB_KVER_NUM must be set by Kbuild"
#endif

/*
 * Largest buddy order.  Before 6.4 MAX_ORDER was exclusive, 6.4 made it
 * inclusive and 6.8 renamed it MAX_PAGE_ORDER.
 */
#if VB_KVER_NUM >= 0x060800
#define VB_MAX_BUDDY_ORDER	MAX_PAGE_ORDER
#elif VB_KVER_NUM >= 0x060400
#define VB_MAX_BUDDY_ORDER	MAX_ORDER
#else
#define VB_MAX_BUDDY_ORDER	(MAX_ORDER - 1)
#endif

/*
 * Shrinker: embedded struct with a name since 6.0; allocated with
 * shrinker_alloc() since 6.7.  Callers embed a struct vb_compat_shrinker.
 */
typedef unsigned long (*vb_shrink_fn)(struct shrinker *,
				     struct shrink_control *);

#if VB_KVER_NUM >= 0x060700
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
#if VB_KVER_NUM >= 0x060000
	return register_shrinker(&cs->s, "%s", name);
#else
	return register_shrinker(&cs->s);
#endif
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
 * Order of a free buddy block (PageBuddy() true, zone->lock held): kept in
 * page_private() of its first page by mm/page_alloc.c (buddy_order() in
 * mm/internal.h, which modules cannot include).  Unchanged from 4.x to 6.x.
 */
static inline unsigned int vb_compat_buddy_order(struct page *page)
{
	return page_private(page);
}

/*
 * Flush the TLB of every online CPU, global entries included (see
 * vb_hint_round()).  x86 exports __flush_tlb_all() for the local CPU; other
 * architectures export no equivalent, and there this is a no-op.
 */
#ifdef CONFIG_X86
#include <linux/smp.h>
#include <asm/tlbflush.h>

static inline void vb_compat_flush_tlb_local(void *unused)
{
	__flush_tlb_all();
}

static inline void vb_compat_flush_tlb_all(void)
{
	on_each_cpu(vb_compat_flush_tlb_local, NULL, 1);
}
#else
static inline void vb_compat_flush_tlb_all(void)
{
}
#endif

/*
 * virtio_find_vqs(): parallel arrays of callbacks and names until 6.10, one
 * array of struct virtqueue_info since 6.11.  A NULL name takes no queue
 * index in both forms.
 */
#define VB_COMPAT_MAX_VQS	8

static inline int vb_compat_find_vqs(struct virtio_device *vdev,
				     unsigned int nvqs,
				     struct virtqueue *vqs[],
				     vq_callback_t *callbacks[],
				     const char *names[])
{
#if VB_KVER_NUM >= 0x060b00
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

/* page_reporting_dev_info.order exists since 5.14 */
static inline void vb_compat_pr_set_order(struct page_reporting_dev_info *pr,
					  unsigned int order)
{
#if VB_KVER_NUM >= 0x050e00
	pr->order = order;
#endif
}

/*
 * Balloon compaction: until 6.x the migration callback hangs off
 * balloon_dev_info and takes (b_dev_info, newpage, page, mode).  Later
 * kernels changed the return convention; this driver targets the 6.1 form.
 */
#define VB_COMPAT_MIGRATE_SUCCESS	MIGRATEPAGE_SUCCESS

#endif /* VB_COMPAT_H */
