/* SPDX-License-Identifier: GPL-2.0 */
/*
 * compat.h - every difference between kernels the driver cares about.
 *
 * Nothing here tests a version number: distribution kernels backport, so
 * each difference is found in what the kernel offers.  A macro the headers
 * define is tested with #ifdef; a declaration is probed in the headers by
 * Kbuild, which passes VB_HAVE_<name> when it finds it.  The rest of the
 * driver uses the helpers below.  Supported: Linux 6.1 (Debian 12) and
 * 6.12 (Debian 13, bookworm-backports).
 */
#ifndef VB_COMPAT_H
#define VB_COMPAT_H

#include <linux/mmzone.h>
#include <linux/mm.h>
#include <linux/huge_mm.h>
#include <linux/spinlock.h>
#include <linux/memory_hotplug.h>
#include <linux/log2.h>
#include <linux/err.h>
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
 * Buddy state: the one place the module reads it.  Free blocks of order
 * @order sit on the lists zone->free_area[order].free_list[migratetype],
 * linked through page->buddy_list (6.0 and later), PageBuddy() set and the
 * order in page_private() (buddy_order() in mm/internal.h, which modules
 * cannot include).  zone->lock must be held, with IRQs off.
 *
 * vb_compat_free_next() returns the free block that follows *@pfn on the
 * free list @mt of that order and sets *@pfn to it; *@pfn ==
 * VB_COMPAT_LIST_HEAD starts at the head of the list.  NULL: the list
 * ended.  ERR_PTR(-EAGAIN): the block at *@pfn is no longer a free block
 * of that order in @zone (allocated, merged, split or offlined since the
 * lock was dropped), so its place in a list is lost.  A block that is
 * still one may have moved to the list of another migratetype of the same
 * order; the walk then goes on in that list, and it ends at any list head
 * of the zone's free_area, never at a head it does not know.  Every block
 * returned is checked PageBuddy() with this order and zone, here, under
 * the lock.
 */
#define VB_COMPAT_LIST_HEAD	ULONG_MAX

static inline bool vb_compat_is_free_block(struct zone *zone,
					   struct page *page,
					   unsigned int order)
{
	return page_zone(page) == zone && PageBuddy(page) &&
	       page_private(page) == order;
}

static inline struct page *vb_compat_free_next(struct zone *zone,
					       unsigned int order,
					       unsigned int mt,
					       unsigned long *pfn)
{
	struct list_head *pos;
	unsigned long off;
	struct page *page;

	if (*pfn == VB_COMPAT_LIST_HEAD) {
		pos = &zone->free_area[order].free_list[mt];
	} else {
		page = pfn_to_online_page(*pfn);
		if (!page || !vb_compat_is_free_block(zone, page, order))
			return ERR_PTR(-EAGAIN);
		pos = &page->buddy_list;
	}
	pos = pos->next;
	off = (unsigned long)pos - (unsigned long)zone->free_area;
	if (off < sizeof(zone->free_area))
		return NULL;	/* a list head: this list ended */
	page = list_entry(pos, struct page, buddy_list);
	if (WARN_ON_ONCE(!vb_compat_is_free_block(zone, page, order)))
		return NULL;
	*pfn = page_to_pfn(page);
	return page;
}

/*
 * Per-CPU free lists.  A page freed with an order mm keeps per CPU (up to
 * PAGE_ALLOC_COSTLY_ORDER, and the PMD order with THP) first waits on
 * per_cpu_ptr(zone->per_cpu_pageset, cpu)->lists[pindex], linked through
 * page->pcp_list, until that CPU allocates it again or mm drains it to the
 * buddy lists.  pcp->lock protects the lists: a page enters and leaves
 * them only under it.  The owning CPU only ever trylocks it (and uses the
 * buddy lists when that fails); mm's drain of another CPU's lists takes it
 * as vb_compat_pcp_lock() does (pcp_spin_lock_maybe_irqsave() in
 * mm/page_alloc.c: on UP a spin_lock would not keep out an interrupt's
 * trylock, so IRQs go off there).
 *
 * A page on a list carries no order: the list's index gives it
 * (pindex_to_order() in mm/page_alloc.c, the same in 6.1 and 6.12):
 * MIGRATE_PCPTYPES lists per order up to PAGE_ALLOC_COSTLY_ORDER, then the
 * THP lists, of HPAGE_PMD_ORDER (6.12) or pageblock_order (6.1).  Those are
 * walked only where the two agree.  -1: a list the driver leaves alone.
 */
static inline int vb_compat_pcp_order(unsigned int pindex)
{
	if (pindex < NR_LOWORDER_PCP_LISTS)
		return pindex / MIGRATE_PCPTYPES;
#ifdef CONFIG_TRANSPARENT_HUGEPAGE
	if (pindex < NR_PCP_LISTS && HPAGE_PMD_ORDER == pageblock_order)
		return HPAGE_PMD_ORDER;
#endif
	return -1;
}

static inline void vb_compat_pcp_lock(struct per_cpu_pages *pcp,
				      unsigned long *flags)
	__acquires(&pcp->lock)
{
#if defined(CONFIG_SMP) || defined(CONFIG_PREEMPT_RT)
	*flags = 0;
	spin_lock(&pcp->lock);
#else
	spin_lock_irqsave(&pcp->lock, *flags);
#endif
}

static inline void vb_compat_pcp_unlock(struct per_cpu_pages *pcp,
					unsigned long *flags)
	__releases(&pcp->lock)
{
#if defined(CONFIG_SMP) || defined(CONFIG_PREEMPT_RT)
	spin_unlock(&pcp->lock);
#else
	spin_unlock_irqrestore(&pcp->lock, *flags);
#endif
}

#if defined(VB_FAULT_INJECT) && defined(CONFIG_SPARSEMEM)
/*
 * Test builds only (debugfs held_blocks): the migratetype of the pageblock
 * of @pfn, read as get_pageblock_migratetype() reads it; mm/page_alloc.c
 * does not export it.  NR_PAGEBLOCK_BITS bits per pageblock in the usemap
 * of the pfn's section, unchanged from 5.x to 6.12 (SPARSEMEM, which
 * x86-64 uses).
 */
static inline unsigned int vb_compat_pageblock_migratetype(unsigned long pfn)
{
	unsigned long *map = section_to_usemap(__pfn_to_section(pfn));
	unsigned long bit = ((pfn & (PAGES_PER_SECTION - 1)) >> pageblock_order) *
			    NR_PAGEBLOCK_BITS;

	return (READ_ONCE(map[bit / BITS_PER_LONG]) >> (bit % BITS_PER_LONG)) &
	       MIGRATETYPE_MASK;
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
 * Balloon compaction: until 6.x the migration callback hangs off
 * balloon_dev_info and takes (b_dev_info, newpage, page, mode).  Later
 * kernels changed the return convention; this driver targets the 6.1 form.
 */
#define VB_COMPAT_MIGRATE_SUCCESS	MIGRATEPAGE_SUCCESS

#endif /* VB_COMPAT_H */
