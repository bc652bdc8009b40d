// SPDX-License-Identifier: GPL-2.0
/*
 * vb_mm.c - the one place that reads mm's free lists.
 *
 * Scan mode (vb_scan.c) reports the pages on the buddy free lists and the
 * per-CPU free lists where they are, and this file alone reads those lists
 * for it: the walk, the validated-kernel check, the self-check and the
 * memory offline fence.  What the walk reads - a block's order in
 * page_private(), the order of a per-CPU list from its index, the lists'
 * links - is mm's internal layout, which no API promises.  A wrong reading
 * hints live pages, so scan is used only where both of these hold:
 *
 *  - The kernel is listed.  scan-validated-kernels (next to this file)
 *    lists, one shell pattern per line, the kernel releases the test suite
 *    validated scan on.  Kbuild matches the release it builds for against
 *    it and passes the matching pattern as VB_SCAN_VALIDATED; none
 *    matching, the module refuses scan from the start.  Adding a kernel is
 *    adding a line.
 *
 *  - The self-check agrees.  At every probe, and after memory goes online
 *    or offline, the module reads the lists with the walk's own helpers
 *    and compares what it finds with mm's own counters, each under the
 *    lock that keeps both still: per zone and order, the blocks on the
 *    free lists of every migratetype, each checked a free block of that
 *    order and zone, against free_area[order].nr_free (zone->lock);
 *    per zone and CPU, the pages on the per-CPU lists, each list's blocks
 *    counted with the order its index gives, against pcp->count
 *    (pcp->lock); and each block's pageblock reads isolated exactly when
 *    the block is on MIGRATE_ISOLATE's list, which the walk relies on to
 *    leave isolated pageblocks alone.  Any difference, any block of the
 *    wrong kind and any non-empty per-CPU list whose order the module
 *    does not know is a disagreement: nothing is explained away.  One
 *    hold covers one order of one zone, or one CPU's lists of one zone:
 *    mm's counters only agree with its lists under those locks.
 *
 * A refusal is for the life of the module (a list that disagreed once is
 * not trusted again): "auto" resolves to alloc, writing "scan" fails, the
 * device's free_page_hint/scan_refusal says why (the kernel first), and
 * one line in the kernel log says it when it happens.  The self-check runs
 * on an unlisted kernel too: its verdict is part of validating a kernel.
 *
 * The walk.  vb_mm_walk() is shaped like the walker mm could offer
 * (Documentation/design.md): it takes the lists' locks in bounded holds,
 * stages what one hold finds, and after dropping the lock hands each
 * staged range to its caller's range() callback, which may sleep.  Scan
 * (vb_scan.c) only turns those ranges into descriptors.
 *
 *  - Buddy free lists: zone->free_area[order].free_list[migratetype] of
 *    every populated zone, every order from the largest down to min_order
 *    (largest blocks first, over all zones, so a walk cut short has found
 *    the most memory it could), every migratetype but MIGRATE_ISOLATE
 *    (blocks on their way out of the allocator: offlining, contiguous
 *    allocations); a place in a list whose block was isolated since is
 *    lost, not followed into that list, and a per-CPU page of an isolated
 *    pageblock is passed over.  Every block is checked free (PageBuddy,
 *    its order, its zone) under zone->lock when it is taken
 *    (vb_mm_free_next()).
 *    zone->lock is taken with IRQs off; one hold takes at most
 *    VB_MM_STEPS_PER_LOCK blocks and ends early when another CPU waits for
 *    the lock (spin_needbreak()).  local_clock() around every hold gives
 *    the longest one and a histogram, in the walk's counters.
 *
 *  - A place that survives dropping the lock.  The walk remembers the pfn
 *    of the last block it took from a list.  After the lock is taken
 *    again it goes on after that block only if the block is still a free
 *    block of the same order in the same zone; a block that moved to
 *    another migratetype's list of that order is followed into that list,
 *    and the walk of a list ends at any free list head of the zone.  A
 *    block that is no longer free (allocated, merged, split, offlined)
 *    makes the walk start that list again, at most VB_MM_MAX_RESTARTS
 *    times, and a list gives at most twice as many blocks as the zone has
 *    room for, so a list that churns cannot keep a walk going forever.
 *
 *  - Per-CPU free lists.  A page freed with a small order (up to
 *    PAGE_ALLOC_COSTLY_ORDER, and THP-sized ones) goes to the freeing
 *    CPU's per_cpu_pages lists of its zone and stays there until that CPU
 *    allocates it or mm drains it.  Since 6.7 mm lets those lists grow to
 *    an eighth of the zone while a CPU frees much memory (and shrinks them
 *    by an eighth a second after): free memory that MemFree does not count
 *    and that free page reporting never sees.  After the buddy lists of
 *    every order, the walk takes every CPU's lists of every zone, each
 *    under its pcp->lock (vb_mm_pcp_lock()): a page on such a list is free
 *    while the lock is held.  Holds are sized like mm's own: one takes at
 *    most the pages mm drains from such lists in one hold (pcp->batch <<
 *    CONFIG_PCP_BATCH_SCALE_MAX, vb_mm_pcp_batch()), then the lock is
 *    dropped (cond_resched()) and taken again, until pcp_max_pages pages
 *    or the pages the lists held when the walk began.  Only one walk runs
 *    at a time (the caller's vq_lock), so one hold per CPU and zone.  The
 *    hold matters beyond this CPU: the owner of the lists trylocks it and
 *    falls back to the buddy lists, but its vmstat drain
 *    (drain_zone_pages()), decay_pcp_high() (6.7 and later) and every
 *    drain_all_pages() caller (reclaim, compaction, offlining) spin on
 *    it.  Under PREEMPT_RT the lock is a sleeping lock and nothing turns
 *    preemption off.
 *
 *    A page that left a list carries no mark, so a walk cannot find its
 *    place by the page it stopped at.  It keeps its place the way
 *    mm/page_reporting keeps its place in a free list: the pages one hold
 *    took from the tail of a list (the coldest, which mm drains first)
 *    are moved, in their order, to the front (list_rotate_to_front()), so
 *    the next hold takes from the tail the pages after them, and a list is
 *    done when its tail is the first page taken from it.  A walk that runs
 *    to the end leaves the list in the order it found it.  In between, the
 *    CPU allocates the pages the walk took first (from the front), the
 *    pages mm frees go to the front and are not taken (the next walk takes
 *    them), the pages mm drains from the tail are not taken, and the first
 *    page allocated or drained makes the walk take pages again that it
 *    took (up to the limit).  Every page taken was on the list, so free,
 *    while the lock was held: a page taken twice is handed out twice, a
 *    page missed is not handed out.
 *
 * Memory going offline.  Offlining the last memory of a zone frees the
 * zone's per-CPU pagesets (zone_pcp_reset()) and, on hot-remove, the
 * memmap and the section's usage map; a walk holding a pointer into them
 * would touch freed memory.  A memory notifier fences the walks with
 * vb_mm_offlining, which vb_mm_fence protects: at MEM_GOING_OFFLINE it
 * takes the fence for writing, which waits for the hold in progress, sets
 * the flag and releases the fence; at MEM_OFFLINE or MEM_CANCEL_OFFLINE
 * it clears the flag the same way (memory hotplug serializes these, one
 * offline at a time).  The fence is never held across the notifier's
 * return: offline_pages() takes pcp_batch_high_lock around
 * MEM_GOING_OFFLINE and again after it, and a lock of ours held from one
 * notification to the next would nest both ways with it.  A walk takes the
 * fence for reading around every hold of zone->lock or a pcp->lock, with a
 * trylock, and reads nothing while the flag is set, rather than stall a
 * round (and system sleep, which waits for the round) for as long as the
 * offline migrates pages; the self-check waits for the offline to end.
 * vb_mm_offline_gen counts the offlines that completed; a walk that
 * remembers a pfn across holds forgets it when the count moved, so a pfn
 * it looks up again was online, memmap and all, when it last read it and
 * nothing went offline since.
 */

#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/module.h>
#include <linux/memory.h>
#include <linux/mmzone.h>
#include <linux/mm.h>
#include <linux/nodemask.h>
#include <linux/cpumask.h>
#include <linux/rwsem.h>
#include <linux/wait.h>
#include <linux/mutex.h>
#include <linux/sched.h>
#include <linux/utsname.h>
#include <linux/memory_hotplug.h>
#include <linux/huge_mm.h>
#include <linux/spinlock.h>
#include <linux/rcupdate.h>
#include <linux/vmstat.h>
#include <linux/percpu.h>
#include <linux/sched/clock.h>
#include <linux/slab.h>
#include <linux/sort.h>
#include <linux/log2.h>
#include <linux/err.h>

#include "vb.h"

#ifdef VB_SCAN_VALIDATED
MODULE_INFO(scan_validated, VB_SCAN_VALIDATED);
#else
MODULE_INFO(scan_validated, "");
#endif

/*
 * Why scan is refused, once it is: the kernel is not listed, the
 * self-check disagreed.  Each pointer is NULL until then.
 */
#define VB_MM_WHY_LEN	128
struct vb_mm_why {
	char buf[VB_MM_WHY_LEN];
	const char *why;
};

static DEFINE_MUTEX(vb_mm_why_lock);
static struct vb_mm_why vb_mm_kernel_why, vb_mm_check_why;

/*
 * The offline fence, memory going offline, and the offlines completed
 * (see the comment above); vb_mm_fence protects the other two.
 */
static DECLARE_RWSEM(vb_mm_fence);
static bool vb_mm_offlining;
static unsigned long vb_mm_offline_gen;
/* the self-check waits here for an offline to end */
static DECLARE_WAIT_QUEUE_HEAD(vb_mm_offline_wq);

/* Refuse scan for the life of the module, saying why (once per kind) */
static void vb_mm_refuse(struct vb_mm_why *w, const char *why)
{
	mutex_lock(&vb_mm_why_lock);
	if (!w->why) {
		strscpy(w->buf, why, sizeof(w->buf));
		/* the text is written before the pointer to it is seen */
		smp_store_release(&w->why, w->buf);
		pr_warn("free page hinting uses alloc, not scan: %s\n", why);
	}
	mutex_unlock(&vb_mm_why_lock);
}

/*
 * Why scan must not read this kernel's lists, or NULL when it may: the
 * kernel first, then the self-check (which runs on unlisted kernels too,
 * so that a kernel can be validated).
 */
const char *vb_mm_scan_refusal(void)
{
	const char *why;

	/* pairs with vb_mm_refuse(): the text is there once the pointer is */
	why = smp_load_acquire(&vb_mm_kernel_why.why);
	/* likewise */
	return why ?: smp_load_acquire(&vb_mm_check_why.why);
}

/*
 * Enter a walk's hold: false while memory goes offline (read nothing).
 * @w->gen is the count of offlines completed, to compare with the one of
 * the hold that remembered a pfn.
 */
bool vb_mm_hold_begin(struct vb_mm_hold *w)
{
	w->fenced = !vb_fault_no_offline_fence();
	if (w->fenced) {
		if (!down_read_trylock(&vb_mm_fence))
			return false;
		if (vb_mm_offlining) {
			up_read(&vb_mm_fence);
			return false;
		}
	}
	w->gen = READ_ONCE(vb_mm_offline_gen);
	return true;
}

void vb_mm_hold_end(struct vb_mm_hold *w)
{
	if (w->fenced)
		up_read(&vb_mm_fence);
}

/* The populated zone after @zone (NULL: the first), or NULL */
static struct zone *vb_mm_next_zone(struct zone *zone)
{
	int nid = zone ? zone_to_nid(zone) : first_online_node;
	int zid = zone ? zone_idx(zone) + 1 : 0;

	for (; nid < MAX_NUMNODES; nid = next_online_node(nid), zid = 0) {
		for (; zid < MAX_NR_ZONES; zid++) {
			zone = &NODE_DATA(nid)->node_zones[zid];
			if (populated_zone(zone))
				return zone;
		}
	}
	return NULL;
}

#ifndef CONFIG_SPARSEMEM
#error "vb_mm.c reads pageblock flags from the sections' usage maps (SPARSEMEM)"
#endif

/*
 * Pageblock flags.  mm keeps NR_PAGEBLOCK_BITS bits per pageblock in the
 * usage map of its section (SPARSEMEM, which every architecture the
 * driver is built for uses) and reads them with get_pfnblock_flags_mask(),
 * which it does not export.  The migratetype is MIGRATETYPE_MASK of them,
 * renamed PAGEBLOCK_MIGRATETYPE_MASK when isolation got a bit of its own
 * (PAGEBLOCK_ISO_MASK, as in 7.3): before, an isolated pageblock has the
 * migratetype MIGRATE_ISOLATE; since, the bit, and the type it had.
 */
#ifdef PAGEBLOCK_MIGRATETYPE_MASK
#define VB_MM_PB_MIGRATETYPE_MASK	PAGEBLOCK_MIGRATETYPE_MASK
#else
#define VB_MM_PB_MIGRATETYPE_MASK	MIGRATETYPE_MASK
#endif
#define VB_MM_PB_NONE			ULONG_MAX

/* The flags of the pageblock of @pfn; VB_MM_PB_NONE: its section went */
static unsigned long vb_mm_pageblock_flags(unsigned long pfn)
{
	struct mem_section *ms = __pfn_to_section(pfn);
	unsigned long bit = ((pfn & (PAGES_PER_SECTION - 1)) >> pageblock_order) *
			    NR_PAGEBLOCK_BITS;
	unsigned long flags = VB_MM_PB_NONE;
	unsigned long *map;

	/*
	 * Hot-remove frees the usage map after an RCU grace period: read it
	 * as pfn_valid() does.
	 */
	rcu_read_lock_sched();
	if (valid_section(ms) && READ_ONCE(ms->usage)) {
		map = section_to_usemap(ms);
		flags = (READ_ONCE(map[bit / BITS_PER_LONG]) >>
			 (bit % BITS_PER_LONG)) & (BIT(NR_PAGEBLOCK_BITS) - 1);
	}
	rcu_read_unlock_sched();
	return flags;
}

/*
 * Whether the pageblock of @pfn is isolated: on its way out of the
 * allocator (memory offline, a contiguous allocation).  Isolation marks
 * the pageblock and moves its free blocks to the MIGRATE_ISOLATE free
 * list in one hold of zone->lock, so under zone->lock a free block is on
 * that list exactly when its pageblock reads isolated (the self-check
 * compares the two).  A section gone reads isolated: nothing of it may be
 * reported.
 */
static bool vb_mm_pageblock_isolated(unsigned long pfn)
{
#ifdef CONFIG_MEMORY_ISOLATION
	unsigned long flags = vb_mm_pageblock_flags(pfn);

	if (flags == VB_MM_PB_NONE)
		return true;
#ifdef PAGEBLOCK_ISO_MASK
	return flags & PAGEBLOCK_ISO_MASK;
#else
	return (flags & VB_MM_PB_MIGRATETYPE_MASK) == MIGRATE_ISOLATE;
#endif
#else
	return false;
#endif
}

#ifdef VB_FAULT_INJECT
/*
 * Test builds only (debugfs held_blocks): the migratetype of the pageblock
 * of @pfn (MIGRATE_TYPES: unknown).
 */
unsigned int vb_mm_pageblock_migratetype(unsigned long pfn)
{
	unsigned long flags = vb_mm_pageblock_flags(pfn);

	if (flags == VB_MM_PB_NONE)
		return MIGRATE_TYPES;
	return flags & VB_MM_PB_MIGRATETYPE_MASK;
}
#endif

/*
 * Buddy state.  Free blocks of order @order sit on the lists
 * zone->free_area[order].free_list[migratetype], linked through
 * page->buddy_list (6.0 and later), PageBuddy() set and the order in
 * page_private() (buddy_order() in mm/internal.h, which modules cannot
 * include).  zone->lock must be held, with IRQs off.
 */
static bool vb_mm_is_free_block(struct zone *zone, struct page *page,
				unsigned int order)
{
	return page_zone(page) == zone && PageBuddy(page) &&
	       page_private(page) == order;
}

/*
 * vb_mm_free_next() returns the free block that follows *@pfn on the free
 * list @mt of @order and sets *@pfn to it; *@pfn == VB_MM_LIST_HEAD starts
 * at the head of the list.  NULL: the list ended.  ERR_PTR(-EAGAIN): the
 * block at *@pfn is no longer a free block of that order in @zone
 * (allocated, merged, split or offlined since the lock was dropped), so
 * its place in a list is lost.  A block that is still one may have moved
 * to the list of another migratetype of the same order; the walk then
 * goes on in that list, and it ends at any list head of the zone's
 * free_area, never at a head it does not know.  A block whose pageblock
 * was isolated since is a lost place too: isolation moved it to the list
 * of MIGRATE_ISOLATE, which the walk leaves alone.  Every block returned
 * is checked a free block of this order and zone, here, under the lock.
 */
#define VB_MM_LIST_HEAD	ULONG_MAX

static struct page *vb_mm_free_next(struct zone *zone, unsigned int order,
				    unsigned int mt, unsigned long *pfn)
{
	struct list_head *pos;
	unsigned long off;
	struct page *page;

	if (*pfn == VB_MM_LIST_HEAD) {
		pos = &zone->free_area[order].free_list[mt];
	} else {
		page = pfn_to_online_page(*pfn);
		if (!page || !vb_mm_is_free_block(zone, page, order))
			return ERR_PTR(-EAGAIN);
		/* isolation moved it to MIGRATE_ISOLATE's list: not there */
		if (vb_mm_pageblock_isolated(*pfn) && !vb_fault_walk_isolated())
			return ERR_PTR(-EAGAIN);
		pos = &page->buddy_list;
	}
	pos = pos->next;
	off = (unsigned long)pos - (unsigned long)zone->free_area;
	if (off < sizeof(zone->free_area))
		return NULL;	/* a list head: this list ended */
	page = list_entry(pos, struct page, buddy_list);
	if (WARN_ON_ONCE(!vb_mm_is_free_block(zone, page, order)))
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
 * as vb_mm_pcp_lock() does (pcp_spin_lock_maybe_irqsave() in
 * mm/page_alloc.c: on UP a spin_lock would not keep out an interrupt's
 * trylock, so IRQs go off there).
 *
 * A page on a list carries no order: the list's index gives it
 * (pindex_to_order() in mm/page_alloc.c, the same from 6.1 to 7.3):
 * MIGRATE_PCPTYPES lists per order up to PAGE_ALLOC_COSTLY_ORDER, then the
 * THP lists, of HPAGE_PMD_ORDER (6.12) or pageblock_order (6.1).  Those are
 * walked only where the two agree.  -1: a list the driver leaves alone.
 */
static int vb_mm_pcp_order(unsigned int pindex)
{
	if (pindex < NR_LOWORDER_PCP_LISTS)
		return pindex / MIGRATE_PCPTYPES;
#ifdef CONFIG_TRANSPARENT_HUGEPAGE
	if (pindex < NR_PCP_LISTS && HPAGE_PMD_ORDER == pageblock_order)
		return HPAGE_PMD_ORDER;
#endif
	return -1;
}

/*
 * Pages mm itself frees from a CPU's per-CPU lists in one hold of their
 * lock when it drains them (drain_pages_zone(), decay_pcp_high()):
 * pcp->batch, scaled by CONFIG_PCP_BATCH_SCALE_MAX where the kernel has
 * it.  A walk holds the lock no longer than that.
 */
static unsigned long vb_mm_pcp_batch(struct per_cpu_pages *pcp)
{
	unsigned long batch = max(READ_ONCE(pcp->batch), 1);

#ifdef CONFIG_PCP_BATCH_SCALE_MAX
	batch <<= CONFIG_PCP_BATCH_SCALE_MAX;
#endif
	return batch;
}

static void vb_mm_pcp_lock(struct per_cpu_pages *pcp, unsigned long *flags)
	__acquires(&pcp->lock)
{
#if defined(CONFIG_SMP) || defined(CONFIG_PREEMPT_RT)
	*flags = 0;
	spin_lock(&pcp->lock);
#else
	spin_lock_irqsave(&pcp->lock, *flags);
#endif
}

static void vb_mm_pcp_unlock(struct per_cpu_pages *pcp, unsigned long *flags)
	__releases(&pcp->lock)
{
#if defined(CONFIG_SMP) || defined(CONFIG_PREEMPT_RT)
	spin_unlock(&pcp->lock);
#else
	spin_unlock_irqrestore(&pcp->lock, *flags);
#endif
}

/*
 * Free pages of @zone that a request without ALLOC_RESERVES, ALLOC_CMA
 * cannot use, as mm's watermark checks count them
 * (__zone_watermark_unusable_free() in mm/page_alloc.c): free CMA pages,
 * the highatomic reserve (its free pages where the kernel counts them,
 * VB_HAVE_NR_FREE_HIGHATOMIC, else the pages reserved) and memory not
 * accepted yet (NR_UNACCEPTED, VB_HAVE_NR_UNACCEPTED).  Per-CPU counter
 * drift included (zone_page_state_snapshot()); the caller keeps the
 * zone's per-CPU stats from being freed (vb_mm_hold_begin()).
 */
unsigned long vb_mm_zone_unusable_free(struct zone *zone)
{
	unsigned long n = zone_page_state_snapshot(zone, NR_FREE_CMA_PAGES);

#ifdef VB_HAVE_NR_FREE_HIGHATOMIC
	n += READ_ONCE(zone->nr_free_highatomic);
#else
	n += READ_ONCE(zone->nr_reserved_highatomic);
#endif
#if defined(VB_HAVE_NR_UNACCEPTED) && defined(CONFIG_UNACCEPTED_MEMORY)
	n += zone_page_state_snapshot(zone, NR_UNACCEPTED);
#endif
	return n;
}

/* Whether free list @mt holds the free blocks of isolated pageblocks */
static bool vb_mm_list_isolates(unsigned int mt)
{
#ifdef CONFIG_MEMORY_ISOLATION
	return mt == MIGRATE_ISOLATE;
#else
	return false;
#endif
}

/* Free lists the walk leaves alone */
static bool vb_mm_walk_skip_mt(unsigned int mt)
{
	return vb_mm_list_isolates(mt) && !vb_fault_walk_isolated();
}

/*
 * Where a walk of the free lists of one order of one zone is, across
 * holds: the list (migratetype @mt), the last block taken from it (@pfn,
 * VB_MM_LIST_HEAD: none yet), the blocks it may still take from it
 * (@budget), the times it lost its place there (@restarts) and the
 * offlines completed when @pfn was taken (@gen).
 */
struct vb_mm_free_cursor {
	struct zone *zone;
	unsigned int order;
	unsigned int mt;
	unsigned long pfn;
	unsigned long budget;
	unsigned int restarts;
	unsigned long gen;
};

#ifdef VB_FAULT_INJECT
/*
 * Test build: the pages on the first 64 blocks of MIGRATE_ISOLATE's free
 * list of the cursor's order and zone, as the walk leaves it alone
 */
static void vb_mm_walk_count_isolated(struct vb_mm_walk *w,
				      struct vb_mm_free_cursor *c)
{
	struct list_head *head;
	struct page *page;
	unsigned int n = 0;

	if (!vb_mm_walk_skip_mt(c->mt) || c->pfn != VB_MM_LIST_HEAD)
		return;
	head = &c->zone->free_area[c->order].free_list[c->mt];
	list_for_each_entry(page, head, buddy_list) {
		if (++n > 64)
			break;
		w->isolated_free += 1UL << c->order;
	}
}
#else
static void vb_mm_walk_count_isolated(struct vb_mm_walk *w,
				      struct vb_mm_free_cursor *c)
{
}
#endif

/* Start free list @mt of the cursor's order and zone */
static void vb_mm_free_list_start(struct vb_mm_free_cursor *c,
				  unsigned int mt)
{
	c->mt = mt;
	c->pfn = VB_MM_LIST_HEAD;
	c->restarts = 0;
	c->budget = 2 * (zone_managed_pages(c->zone) >> c->order) +
		    VB_MM_STEPS_PER_LOCK;
}

/* A staged range: blocks of @order (vb_mm_walk_stage()) */
struct vb_mm_staged {
	struct vb_mm_range r;
	unsigned int order;
};

/*
 * Extend @r by the @nr pages at @pfn when they touch it, on either side,
 * and the range stays at most VB_MM_MAX_RANGE pages.  Returns whether it
 * did.
 */
bool vb_mm_range_extend(struct vb_mm_range *r, unsigned long pfn,
			unsigned long nr)
{
	if (r->nr + nr > VB_MM_MAX_RANGE)
		return false;
	if (r->pfn + r->nr == pfn) {
		r->nr += nr;
		return true;
	}
	if (pfn + nr == r->pfn) {
		r->pfn = pfn;
		r->nr += nr;
		return true;
	}
	return false;
}

/* sort() order of struct vb_mm_range: by first pfn */
int vb_mm_range_cmp(const void *a, const void *b)
{
	const struct vb_mm_range *x = a, *y = b;

	return x->pfn < y->pfn ? -1 : x->pfn > y->pfn;
}

/*
 * Stage the block of @order at @pfn: it extends the last staged range
 * when that is of the same order and touches it.  False: no room left.
 */
static bool vb_mm_walk_stage(struct vb_mm_walk *w, unsigned long pfn,
			     unsigned int order)
{
	unsigned long nr = 1UL << order;
	struct vb_mm_staged *st;

#ifdef VB_FAULT_INJECT
	if (vb_mm_pageblock_isolated(pfn))
		w->isolated_taken += nr;
#endif
	if (w->nr_staged) {
		st = &w->stage[w->nr_staged - 1];
		if (st->order == order && vb_mm_range_extend(&st->r, pfn, nr))
			return true;
	}
	if (w->nr_staged == VB_MM_STAGE_RANGES)
		return false;
	st = &w->stage[w->nr_staged++];
	st->r.pfn = pfn;
	st->r.nr = nr;
	st->order = order;
	return true;
}

/*
 * After a hold, with no lock held: hand the staged ranges to the caller,
 * sorted.  Returns what @range returned when it ends the walk, else 0.
 */
static int vb_mm_walk_flush(struct vb_mm_walk *w)
{
	unsigned int i;
	int err = 0;

	/* r is first in struct vb_mm_staged: vb_mm_range_cmp() sorts them */
	BUILD_BUG_ON(offsetof(struct vb_mm_staged, r));
	if (w->nr_staged > 1)
		sort(w->stage, w->nr_staged, sizeof(*w->stage),
		     vb_mm_range_cmp, NULL);
	for (i = 0; i < w->nr_staged && !err; i++)
		err = w->range(w, &w->stage[i].r, w->stage[i].order);
	w->nr_staged = 0;
	return err;
}

/* Account a hold of zone->lock that lasted @ns */
static void vb_mm_walk_held(struct vb_mm_walk *w, u64 ns)
{
	w->holds++;
	w->hold_ns += ns;
	w->max_hold_ns = max(w->max_hold_ns, ns);
	w->hold_hist[min_t(unsigned int, ilog2((ns >> 10) | 1),
			   VB_MM_HOLD_HIST - 1)]++;
}

/*
 * One hold of zone->lock: stage free blocks from the free lists of the
 * cursor's order and zone, from where it is, at most VB_MM_STEPS_PER_LOCK
 * of them, fewer when another CPU wants the lock.  The buddy state only
 * changes under zone->lock, so every block staged was free at that time.
 * Returns whether the lists of this order have more.
 */
static bool vb_mm_free_hold(struct vb_mm_walk *w, void *cursor)
{
	struct vb_mm_free_cursor *c = cursor;
	struct zone *zone = c->zone;
	unsigned long steps = 0, prev, flags;
	struct vb_mm_hold mh;
	struct page *page;
	u64 t0;

	/* memory goes offline: leave this order to the next walk */
	if (!vb_mm_hold_begin(&mh))
		return false;
	/* memory went offline since the last hold: forget the place */
	if (mh.gen != c->gen)
		c->pfn = VB_MM_LIST_HEAD;
	c->gen = mh.gen;
	t0 = local_clock();
	spin_lock_irqsave(&zone->lock, flags);
	while (c->mt < MIGRATE_TYPES) {
		if (steps && (steps >= VB_MM_STEPS_PER_LOCK ||
			      spin_needbreak(&zone->lock)))
			break;
		if (vb_mm_walk_skip_mt(c->mt) || !c->budget) {
			vb_mm_walk_count_isolated(w, c);
			vb_mm_free_list_start(c, c->mt + 1);
			continue;
		}
		prev = c->pfn;
		page = vb_mm_free_next(zone, c->order, c->mt, &c->pfn);
		if (IS_ERR(page)) {
			/* lost its place in the list: start it again */
			if (++c->restarts > VB_MM_MAX_RESTARTS)
				vb_mm_free_list_start(c, c->mt + 1);
			else
				c->pfn = VB_MM_LIST_HEAD;
			continue;
		}
		if (!page) {
			vb_mm_free_list_start(c, c->mt + 1);
			continue;
		}
		if (!vb_mm_walk_stage(w, c->pfn, c->order)) {
			c->pfn = prev;	/* the next hold takes it */
			break;
		}
		steps++;
		c->budget--;
		w->pfns += 1UL << c->order;
	}
	spin_unlock_irqrestore(&zone->lock, flags);
	vb_mm_walk_held(w, local_clock() - t0);
	vb_mm_hold_end(&mh);
	return c->mt < MIGRATE_TYPES;
}

/*
 * Hold after hold of @hold, each from where @cursor is, until it says
 * there is no more: before each hold, ask @w->stop; after each, with no
 * lock held, hand out what it staged.
 */
static int vb_mm_walk_holds(struct vb_mm_walk *w,
			    bool (*hold)(struct vb_mm_walk *w, void *cursor),
			    void *cursor)
{
	bool more;
	int err;

	do {
		if (w->stop && w->stop(w))
			return -EINTR;
		more = hold(w, cursor);
		err = vb_mm_walk_flush(w);
		if (err)
			return err;
		cond_resched();
	} while (more);
	return 0;
}

/* The free lists of @order in @zone */
static int vb_mm_walk_order(struct vb_mm_walk *w, struct zone *zone,
			    unsigned int order)
{
	struct vb_mm_free_cursor c = { .zone = zone, .order = order };

	vb_mm_free_list_start(&c, 0);
	return vb_mm_walk_holds(w, vb_mm_free_hold, &c);
}

/*
 * Where a walk of one CPU's per-CPU lists of a zone is, across holds:
 * the list (index) it is at, the first page it took from that list (NULL:
 * none yet), the pages it took from all of them and the most it may take.
 */
struct vb_mm_pcp_cursor {
	struct zone *zone;
	unsigned int cpu;
	unsigned int list;
	struct page *first;
	unsigned long taken;
	unsigned long limit;
	bool started;
};

/*
 * One hold of the lock of a CPU's per-CPU lists in a zone: stage pages
 * from the lists, each from its tail, blocks of order >= min_order, at
 * most mm's own drain batch of pages (vb_mm_pcp_batch()), from where the
 * cursor is.  The pages taken from a list are moved, in their order, to
 * its front, so its tail is the next page to take; a list is done when its
 * tail is the first page taken from it again.  Every page staged was on a
 * list, so free, while the lock was held.  Returns whether there is more
 * to take.
 */
static bool vb_mm_pcp_hold(struct vb_mm_walk *w, void *cursor)
{
	struct vb_mm_pcp_cursor *c = cursor;
	unsigned long batch, held_pages = 0, skipped = 0, pfn, flags, nr;
	unsigned long pageblock = ULONG_MAX;
	struct zone *zone = c->zone;
	struct per_cpu_pages *pcp;
	struct page *page, *last;
	struct list_head *head;
	struct vb_mm_hold mh;
	bool full = false, isolated = false;
	u64 held, t0;
	int order;

	/* the zone's pagesets stay while no memory goes offline */
	if (!vb_mm_hold_begin(&mh))
		return false;
	if (!populated_zone(zone))
		goto out_fence;
	pcp = per_cpu_ptr(zone->per_cpu_pageset, c->cpu);
	if (vb_fault_walk_delay(zone, pcp, c->cpu))
		goto out_fence;
	t0 = local_clock();
	vb_mm_pcp_lock(pcp, &flags);
	if (!c->started) {
		c->limit = min_t(unsigned long, c->limit,
				 max(READ_ONCE(pcp->count), 0));
		c->started = true;
	}
	batch = vb_mm_pcp_batch(pcp);
	for (; c->list < NR_PCP_LISTS; c->list++, c->first = NULL) {
		order = vb_mm_pcp_order(c->list);
		if (order < 0 || (unsigned int)order < w->min_order)
			continue;
		nr = 1UL << order;
		head = &pcp->lists[c->list];
		last = NULL;
		list_for_each_entry_reverse(page, head, pcp_list) {
			if (page == c->first)
				break;	/* back at the pages taken first */
			if ((held_pages && held_pages + nr > batch) ||
			    c->taken + nr > c->limit) {
				full = true;
				break;
			}
			pfn = page_to_pfn(page);
			if (WARN_ON_ONCE(page_zone(page) != zone ||
					 !zone_spans_pfn(zone, pfn + nr - 1))) {
				c->limit = 0;
				full = true;
				break;
			}
			/*
			 * A page of a pageblock isolated since it was freed:
			 * passed over, not taken (isolation drains the lists
			 * next).  The flags are read once per pageblock of a
			 * run of its pages.
			 */
			if (pfn >> pageblock_order != pageblock) {
				pageblock = pfn >> pageblock_order;
				isolated = vb_mm_pageblock_isolated(pfn);
			}
			if (isolated && !vb_fault_walk_isolated()) {
				skipped += nr;
			} else if (!vb_mm_walk_stage(w, pfn, order)) {
				full = true;
				break;
			}
			held_pages += nr;
			c->taken += nr;
			if (!c->first)
				c->first = page;
			last = page;
		}
		/* the pages taken go to the front, in their order */
		if (last)
			list_rotate_to_front(&last->pcp_list, head);
		if (full)
			break;
	}
	vb_mm_pcp_unlock(pcp, &flags);
	held = local_clock() - t0;
	w->pcp_max_hold_ns = max(w->pcp_max_hold_ns, held);
	w->pcp_holds++;
	w->pcp_pfns += held_pages - skipped;
	vb_mm_hold_end(&mh);
	/* a hold that took nothing ends the walk of these lists */
	return held_pages && c->list < NR_PCP_LISTS && c->taken < c->limit;

out_fence:
	vb_mm_hold_end(&mh);
	return false;
}

/* The per-CPU lists of @cpu in @zone */
static int vb_mm_walk_pcp_cpu(struct vb_mm_walk *w, struct zone *zone,
			      unsigned int cpu)
{
	struct vb_mm_pcp_cursor c = {
		.zone = zone, .cpu = cpu, .limit = w->pcp_max_pages,
	};

	return vb_mm_walk_holds(w, vb_mm_pcp_hold, &c);
}

/* The per-CPU lists of every CPU in every populated zone */
static int vb_mm_walk_pcp(struct vb_mm_walk *w)
{
	struct zone *zone;
	unsigned int cpu;
	int err;

	if (!w->pcp_max_pages)
		return 0;
	for (zone = vb_mm_next_zone(NULL); zone; zone = vb_mm_next_zone(zone)) {
		for_each_possible_cpu(cpu) {
			err = vb_mm_walk_pcp_cpu(w, zone, cpu);
			if (err)
				return err;
		}
	}
	return 0;
}

/*
 * The @k-th (order, node, zone) group of a walk, largest order first, over
 * @per_order = nr_node_ids * MAX_NR_ZONES zones per order.  Returns the
 * zone, or NULL for an offline node or an empty zone.
 */
static struct zone *vb_mm_walk_group(unsigned int k, unsigned int per_order,
				     unsigned int *order)
{
	int nid = (k % per_order) / MAX_NR_ZONES;
	struct zone *zone;

	*order = VB_MAX_BUDDY_ORDER - k / per_order;
	if (!node_online(nid))
		return NULL;
	zone = &NODE_DATA(nid)->node_zones[k % MAX_NR_ZONES];
	return populated_zone(zone) ? zone : NULL;
}

/*
 * Walk every free list: the buddy free lists of every order >= min_order,
 * largest first, of every populated zone, from group @w->start on and
 * wrapping around, then every CPU's per-CPU lists of every zone.  Returns
 * 0, -EINTR when @w->stop said so, or what @w->range returned.
 */
int vb_mm_walk(struct vb_mm_walk *w)
{
	unsigned int per_order = nr_node_ids * MAX_NR_ZONES;
	unsigned int total = (VB_MAX_BUDDY_ORDER - w->min_order + 1) *
			     per_order;
	unsigned int first = w->start < total ? w->start : 0;
	unsigned int k, g, order;
	struct zone *zone;
	int err;

	w->pfns = 0;
	w->pcp_pfns = 0;
	w->holds = 0;
	w->hold_ns = 0;
	w->max_hold_ns = 0;
	memset(w->hold_hist, 0, sizeof(w->hold_hist));
	w->pcp_holds = 0;
	w->pcp_max_hold_ns = 0;
#ifdef VB_FAULT_INJECT
	w->isolated_free = 0;
	w->isolated_taken = 0;
#endif
	w->nr_staged = 0;
	if (WARN_ON_ONCE(!w->stage))
		return -ENOMEM;

	for (k = 0; k < total; k++) {
		g = (first + k) % total;
		zone = vb_mm_walk_group(g, per_order, &order);
		if (!zone)
			continue;
		err = vb_mm_walk_order(w, zone, order);
		if (err) {
			w->start = g;
			return err;
		}
	}
	w->start = 0;
	return vb_mm_walk_pcp(w);
}

/* The staging ranges of a walk (free page hinting only) */
int vb_mm_walk_init(struct vb_mm_walk *w)
{
	w->stage = kvmalloc_array(VB_MM_STAGE_RANGES, sizeof(*w->stage),
				  GFP_KERNEL);
	return w->stage ? 0 : -ENOMEM;
}

void vb_mm_walk_destroy(struct vb_mm_walk *w)
{
	kvfree(w->stage);
	w->stage = NULL;
}

/* Free lists of @order in @zone against nr_free; false: @why says how not */
static bool vb_mm_check_order(struct zone *zone, unsigned int order,
			      char *why, size_t len)
{
	struct free_area *area = &zone->free_area[order];
	unsigned long nr_free, counted = 0, bad = ULONG_MAX, flags;
	bool bad_iso = false;
	struct page *page;
	unsigned int mt;

	spin_lock_irqsave(&zone->lock, flags);
	nr_free = area->nr_free;
	for (mt = 0; mt < MIGRATE_TYPES && bad == ULONG_MAX; mt++) {
		list_for_each_entry(page, &area->free_list[mt], buddy_list) {
			if (!vb_mm_is_free_block(zone, page, order)) {
				bad = page_to_pfn(page);
				break;
			}
			if (vb_mm_pageblock_isolated(page_to_pfn(page)) !=
			    vb_mm_list_isolates(mt)) {
				bad = page_to_pfn(page);
				bad_iso = true;
				break;
			}
			/* more than mm counts: stop, it disagrees anyway */
			if (++counted > nr_free)
				break;
		}
	}
	spin_unlock_irqrestore(&zone->lock, flags);

	counted += vb_fault_self_check_skew(order);
	if (bad != ULONG_MAX && bad_iso) {
		snprintf(why, len,
			 "self-check: %s order %u block at pfn %#lx: its pageblock's isolation and its list disagree",
			 zone->name, order, bad);
		return false;
	}
	if (bad != ULONG_MAX) {
		snprintf(why, len,
			 "self-check: %s order %u block at pfn %#lx is not a free block of that order",
			 zone->name, order, bad);
		return false;
	}
	if (counted != nr_free) {
		snprintf(why, len,
			 "self-check: %s order %u nr_free %lu != %lu counted",
			 zone->name, order, nr_free, counted);
		return false;
	}
	return true;
}

/* @cpu's per-CPU lists of @zone against pcp->count */
static bool vb_mm_check_pcp(struct zone *zone, unsigned int cpu,
			    char *why, size_t len)
{
	struct per_cpu_pages *pcp = per_cpu_ptr(zone->per_cpu_pageset, cpu);
	unsigned long counted = 0, count, flags;
	int order, bad_list = -1;
	struct page *page;
	unsigned int i;

	vb_mm_pcp_lock(pcp, &flags);
	count = pcp->count;
	for (i = 0; i < NR_PCP_LISTS && bad_list < 0; i++) {
		order = vb_mm_pcp_order(i);
		list_for_each_entry(page, &pcp->lists[i], pcp_list) {
			if (order < 0 || page_zone(page) != zone ||
			    PageBuddy(page)) {
				bad_list = i;
				break;
			}
			counted += 1UL << order;
			if (counted > count)
				break;
		}
	}
	vb_mm_pcp_unlock(pcp, &flags);

	if (bad_list >= 0) {
		snprintf(why, len,
			 "self-check: %s cpu %u per-CPU list %d holds a page the module cannot explain",
			 zone->name, cpu, bad_list);
		return false;
	}
	if (counted != count) {
		snprintf(why, len,
			 "self-check: %s cpu %u pcp count %lu != %lu counted",
			 zone->name, cpu, count, counted);
		return false;
	}
	return true;
}

/*
 * Compare the module's reading of every free list with mm's counters.
 * False: @why says where they differ.  Runs inside the offline fence (no
 * zone's pagesets go away meanwhile).
 */
static bool vb_mm_self_check(char *why, size_t len)
{
	struct zone *zone;
	unsigned int order, cpu;

	for (zone = vb_mm_next_zone(NULL); zone; zone = vb_mm_next_zone(zone)) {
		for (order = 0; order <= VB_HINT_MAX_ORDER; order++) {
			if (!vb_mm_check_order(zone, order, why, len))
				return false;
			cond_resched();
		}
		for_each_online_cpu(cpu) {
			if (!vb_mm_check_pcp(zone, cpu, why, len))
				return false;
			cond_resched();
		}
	}
	return true;
}

/* Run the self-check, unless it disagreed already; refuse when it fails */
void vb_mm_check(void)
{
	char why[VB_MM_WHY_LEN];
	bool ok;

	if (READ_ONCE(vb_mm_check_why.why))
		return;
	for (;;) {
		down_read(&vb_mm_fence);
		if (!vb_mm_offlining)
			break;
		up_read(&vb_mm_fence);
		wait_event(vb_mm_offline_wq, !READ_ONCE(vb_mm_offlining));
	}
	ok = vb_mm_self_check(why, sizeof(why));
	up_read(&vb_mm_fence);
	if (!ok)
		vb_mm_refuse(&vb_mm_check_why, why);
}

static int vb_mm_memory_notify(struct notifier_block *nb,
			       unsigned long action, void *arg)
{
	switch (action) {
	case MEM_GOING_OFFLINE:
		/* waits for the hold in progress; keeps the next ones out */
		down_write(&vb_mm_fence);
		WRITE_ONCE(vb_mm_offlining, true);
		up_write(&vb_mm_fence);
		break;
	case MEM_OFFLINE:
	case MEM_CANCEL_OFFLINE:
		down_write(&vb_mm_fence);
		WRITE_ONCE(vb_mm_offlining, false);
		if (action == MEM_OFFLINE)
			WRITE_ONCE(vb_mm_offline_gen, vb_mm_offline_gen + 1);
		up_write(&vb_mm_fence);
		wake_up_all(&vb_mm_offline_wq);
		if (action == MEM_OFFLINE)
			vb_mm_check();
		break;
	case MEM_ONLINE:
		vb_mm_check();
		break;
	}
	return NOTIFY_OK;
}

static struct notifier_block vb_mm_nb = {
	.notifier_call = vb_mm_memory_notify,
};

/* Module load: is this kernel listed?  Then fence memory offline. */
int vb_mm_init(void)
{
#ifndef VB_SCAN_VALIDATED
	char why[VB_MM_WHY_LEN];

	snprintf(why, sizeof(why), "kernel %s not validated",
		 init_utsname()->release);
	vb_mm_refuse(&vb_mm_kernel_why, why);
#endif
	return register_memory_notifier(&vb_mm_nb);
}

void vb_mm_exit(void)
{
	unregister_memory_notifier(&vb_mm_nb);
}
