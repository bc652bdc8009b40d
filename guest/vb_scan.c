// SPDX-License-Identifier: GPL-2.0
/*
 * vb_scan.c - the scan search: report free buddy blocks where they are.
 *
 * Scan is used only when the device promised to keep every write made
 * after it issued the command id (VIRTIO_BALLOON_F_HINT_KEEP_WRITES) and the
 * ring carries guest physical addresses with no DMA API bounce in between
 * (vb_core_hint_mode()).  Then a block that was free when we read it, after
 * we had read the command id, may be reported without being held: its
 * content is dead, and whatever the guest writes to it later is the
 * device's to keep.
 *
 * A round walks the buddy allocator's free lists, not the memory map, so
 * it costs what it finds: zone->free_area[order].free_list[migratetype] of
 * every populated zone, for every order from the largest down to
 * min_order (largest blocks first, over all zones, so a round the host
 * cuts short has reported the most memory it could), every migratetype but
 * MIGRATE_ISOLATE (blocks on their way out of the allocator: offlining,
 * contiguous allocations).  Every block is checked free (PageBuddy, its
 * order) under zone->lock when it is taken (vb_compat_free_next() in
 * compat.h, the one reader of buddy state).  Blocks wait as ranges of
 * pages: a block next to the last range extends it; when the ranges of a
 * chain are all used they are sorted and adjacent or overlapping ones
 * merged (up to 1 GiB a range), and only when that frees none are they
 * queued as one chain.  Nothing is allocated, zeroed or held.
 *
 * Bounded holds.  zone->lock is taken with IRQs off.  One hold takes at
 * most VB_SCAN_STEPS_PER_LOCK blocks and ends early when another CPU waits
 * for the lock (spin_needbreak()).  local_clock() around every hold gives
 * the longest one, reported in the counters.
 *
 * A place that survives dropping the lock.  The walk remembers the pfn of
 * the last block it took from a list.  After the lock is taken again it
 * goes on after that block only if the block is still a free block of the
 * same order in the same zone; a block that moved to another migratetype's
 * list of that order is followed into that list, and the walk of a list
 * ends at any free list head of the zone.  A block that is no longer free
 * (allocated, merged, split, offlined) makes the walk start that list
 * again, at most VB_SCAN_MAX_RESTARTS times, and a list gives at most
 * twice as many blocks as the zone has room for, so a list that churns
 * cannot keep a round going forever.  A block taken twice is merged with
 * its copy when both wait in the same ranges, else sent twice (it was free
 * both times).
 *
 * Coverage.  A round starts at the (order, node, zone) where the previous
 * one stopped and wraps around, so rounds cut short by the host (every
 * dirty bitmap sync of a big guest ends one) still cover memory evenly; a
 * round that finished lets the next one start at the largest order.
 *
 * Memory hotplug.  A block on a free list is online: offlining takes free
 * blocks off the lists under zone->lock.  The remembered pfn is looked up
 * again with pfn_to_online_page() under the lock before its memmap is read.
 *
 * Per-CPU free lists.  A page freed with a small order (up to
 * PAGE_ALLOC_COSTLY_ORDER, and THP-sized ones) goes to the freeing CPU's
 * per_cpu_pages lists of its zone, not to the free lists above, and stays
 * there until that CPU allocates it or mm drains it.  Since 6.7 mm lets
 * those lists grow to an eighth of the zone while a CPU frees much memory
 * (and shrinks them by an eighth a second after): free memory that
 * MemFree does not count and that free page reporting never sees.  After
 * the free lists of every order, a round takes every CPU's lists of every
 * zone, each under its pcp->lock (vb_compat_pcp_lock() in compat.h):
 * a page on such a list is free while the lock is held.  A page that
 * left a list carries no mark, so a walk cannot find its place again
 * once the lock is dropped: one hold stages the pages of one CPU's lists
 * in a zone, from each list's tail (the coldest pages, which mm drains
 * first), at most pcp_max_pages pages (knob, 0 leaves the lists alone)
 * and VB_SCAN_PCP_RANGES ranges, merging neighbours as it goes; the
 * staged ranges are sorted, merged and queued after the lock is dropped.
 * The hold keeps preemption off on this CPU only; the owner of the lists
 * never waits for it (it trylocks, and uses the buddy lists meanwhile).
 * Its length is in max_pcp_hold_ns.  The per-CPU lists are a phase of
 * their own at the end of a round: a round cut short before it leaves
 * them to the next round's end.
 */

#include <linux/mm.h>
#include <linux/mmzone.h>
#include <linux/nodemask.h>
#include <linux/sched.h>
#include <linux/sched/clock.h>
#include <linux/spinlock.h>
#include <linux/log2.h>
#include <linux/sort.h>
#include <linux/slab.h>
#include <linux/cpumask.h>
#include <linux/percpu.h>

#include "vb.h"

/* Free lists the walk leaves alone */
static bool vb_scan_skip_mt(unsigned int mt)
{
#ifdef CONFIG_MEMORY_ISOLATION
	return mt == MIGRATE_ISOLATE;
#else
	return false;
#endif
}

/* Start free list @mt of @order in @zone */
static void vb_scan_list_start(struct vb_scan_state *sc, struct zone *zone,
			       unsigned int order, unsigned int mt)
{
	sc->mt = mt;
	sc->pfn = VB_COMPAT_LIST_HEAD;
	sc->restarts = 0;
	sc->budget = 2 * (zone_managed_pages(zone) >> order) +
		     VB_SCAN_STEPS_PER_LOCK;
}

/* Extend range @r (NULL: none) by the @nr pages at @pfn if they touch it */
static bool vb_scan_extend(struct vb_scan_range *r, unsigned long pfn,
			   unsigned long nr)
{
	if (!r || r->nr + nr > VB_SCAN_MAX_RANGE)
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

/* Add the free block at @pfn of @order to the ranges (there is room) */
static void vb_scan_add(struct vb_scan_state *sc, unsigned long pfn,
			unsigned int order)
{
	unsigned long nr = 1UL << order;

	sc->pend_by_order[order]++;
	if (vb_scan_extend(sc->n ? &sc->r[sc->n - 1] : NULL, pfn, nr))
		return;
	sc->r[sc->n].pfn = pfn;
	sc->r[sc->n].nr = nr;
	sc->n++;
}

static int vb_scan_range_cmp(const void *a, const void *b)
{
	const struct vb_scan_range *x = a, *y = b;

	return x->pfn < y->pfn ? -1 : x->pfn > y->pfn;
}

/*
 * Sort the @nr ranges at @r and merge those that touch or overlap (up to
 * 1 GiB).  Returns how many are left.
 */
static unsigned int vb_scan_merge(struct vb_scan_range *r, unsigned int nr)
{
	struct vb_scan_range *last;
	unsigned long end;
	unsigned int i, n = 0;

	if (nr < 2)
		return nr;
	sort(r, nr, sizeof(*r), vb_scan_range_cmp, NULL);
	for (i = 1; i < nr; i++) {
		last = &r[n];
		end = max(last->pfn + last->nr, r[i].pfn + r[i].nr);
		if (r[i].pfn <= last->pfn + last->nr &&
		    end - last->pfn <= VB_SCAN_MAX_RANGE) {
			last->nr = end - last->pfn;
			continue;
		}
		r[++n] = r[i];
	}
	return n + 1;
}

/* Merge the ranges waiting for the next chain */
static void vb_scan_compact(struct vb_scan_state *sc)
{
	sc->n = vb_scan_merge(sc->r, sc->n);
}

/*
 * One hold of zone->lock: take free blocks of @order from the free lists
 * of @zone, from where the walk is, for at most VB_SCAN_STEPS_PER_LOCK
 * blocks.  Stops early when the ranges are all used (the caller merges or
 * queues them) or another CPU wants the lock.  The buddy state only
 * changes under zone->lock, so every block taken was free at that time.
 */
static void vb_scan_hold(struct vb_device *vb, struct zone *zone,
			 unsigned int order)
{
	struct vb_scan_state *sc = &vb->hint.scan;
	unsigned long steps = 0, flags;
	struct page *page;
	u64 t0, held;

	t0 = local_clock();
	spin_lock_irqsave(&zone->lock, flags);
	while (sc->mt < MIGRATE_TYPES && sc->n < sc->max) {
		if (steps && (steps >= VB_SCAN_STEPS_PER_LOCK ||
			      spin_needbreak(&zone->lock)))
			break;
		if (vb_scan_skip_mt(sc->mt) || !sc->budget) {
			vb_scan_list_start(sc, zone, order, sc->mt + 1);
			continue;
		}
		page = vb_compat_free_next(zone, order, sc->mt, &sc->pfn);
		if (IS_ERR(page)) {
			/* lost its place in the list: start it again */
			if (++sc->restarts > VB_SCAN_MAX_RESTARTS)
				vb_scan_list_start(sc, zone, order, sc->mt + 1);
			else
				sc->pfn = VB_COMPAT_LIST_HEAD;
			continue;
		}
		if (!page) {
			vb_scan_list_start(sc, zone, order, sc->mt + 1);
			continue;
		}
		steps++;
		sc->budget--;
		vb_scan_add(sc, sc->pfn, order);
		sc->pfns += 1UL << order;
	}
	spin_unlock_irqrestore(&zone->lock, flags);
	held = local_clock() - t0;

	sc->max_hold_ns = max(sc->max_hold_ns, held);
	sc->holds++;
	sc->hold_ns += held;
	sc->hold_hist[min_t(unsigned int, ilog2((held >> 10) | 1),
			    VB_SCAN_HOLD_HIST - 1)]++;
}

/*
 * Queue the ranges as one chain.  Returns 0, or -EINTR when the round must
 * stop (the ranges are dropped: nothing is held).
 */
static int vb_scan_queue(struct vb_device *vb, unsigned int *chains)
{
	struct vb_hint *h = &vb->hint;
	struct vb_scan_state *sc = &h->scan;
	struct scatterlist *sgs[1] = { h->sg };
	struct vb_hint_chain *c;
	unsigned int i;
	u64 bytes = 0;
	int err;

	if (!sc->n)
		return 0;
	/* one descriptor per range, plus the slot kept for STOP */
	if (!vb_hint_wait_room(vb, sc->n + 1, ULONG_MAX, true))
		return -EINTR;
	c = vb_hint_chain_alloc();
	if (!c)
		return -ENOMEM;

	sg_init_table(h->sg, sc->n);
	for (i = 0; i < sc->n; i++) {
		sg_set_page(&h->sg[i], pfn_to_page(sc->r[i].pfn),
			    sc->r[i].nr << PAGE_SHIFT, 0);
		bytes += (u64)sc->r[i].nr << PAGE_SHIFT;
	}
	/* the token carries no page: nothing is held */
	c->nr_blocks = sc->n;
	err = vb_hint_queue(vb, c, sgs, 0, 1);
	if (err) {
		kfree(c);
		return err;
	}

	vb_hint_count_chain(h, sc->n, bytes, sc->pend_by_order);
	sc->n = 0;
	memset(sc->pend_by_order, 0, sizeof(sc->pend_by_order));
	vb_hint_chain_queued(h, chains);
	return 0;
}

#ifdef VB_FAULT_INJECT
/* The walk of the test build sends nothing: it counts what it would send */
static void vb_scan_tally(struct vb_scan_state *sc, struct vb_scan_walk *w)
{
	unsigned int i;

	for (i = 0; i < sc->n; i++)
		w->free_pages += sc->r[i].nr;
	w->ranges += sc->n;
	sc->n = 0;
	memset(sc->pend_by_order, 0, sizeof(sc->pend_by_order));
}
#else
static void vb_scan_tally(struct vb_scan_state *sc, struct vb_scan_walk *w)
{
}
#endif

/*
 * The ranges are all used: merge them, and when that frees less than a
 * quarter of them send them as a chain, or count them into @w (the test
 * build's walk).  Returns 0, or an error with which the round stops.
 */
static int vb_scan_make_room(struct vb_device *vb, unsigned int *chains,
			     struct vb_scan_walk *w)
{
	struct vb_scan_state *sc = &vb->hint.scan;

	vb_scan_compact(sc);
	if (sc->n < sc->max && sc->n <= sc->max - sc->max / 4)
		return 0;
	if (w) {
		vb_scan_tally(sc, w);
		return 0;
	}
	return vb_scan_queue(vb, chains);
}

/*
 * Walk the free lists of @order in @zone.  The ranges go out as chains, or
 * into @w (the test build's walk, which ignores the round's stop).
 * Returns 0, or an error with which the round stops.
 */
static int vb_scan_order(struct vb_device *vb, struct zone *zone,
			 unsigned int order, unsigned int *chains,
			 struct vb_scan_walk *w)
{
	struct vb_scan_state *sc = &vb->hint.scan;
	int err;

	vb_scan_list_start(sc, zone, order, 0);
	while (sc->mt < MIGRATE_TYPES) {
		if (!w && vb_hint_round_must_stop(vb))
			return -EINTR;
		vb_scan_hold(vb, zone, order);
		cond_resched();
		if (sc->n < sc->max)
			continue;
		err = vb_scan_make_room(vb, chains, w);
		if (err)
			return err;
	}
	return 0;
}

/*
 * Stage the block of @order at @pfn from a per-CPU list: extend the last
 * staged range when it touches it, else start a range.  False: no range
 * is left.
 */
static bool vb_scan_pcp_stage(struct vb_scan_state *sc, unsigned long pfn,
			      unsigned int order)
{
	unsigned long nr = 1UL << order;

	if (!vb_scan_extend(sc->pcp_n ? &sc->pcp_r[sc->pcp_n - 1] : NULL,
			    pfn, nr)) {
		if (sc->pcp_n == VB_SCAN_PCP_RANGES)
			return false;
		sc->pcp_r[sc->pcp_n].pfn = pfn;
		sc->pcp_r[sc->pcp_n].nr = nr;
		sc->pcp_n++;
	}
	/* counted with the next chain, as a block of the free lists is */
	sc->pend_by_order[order]++;
	sc->pcp_pfns += nr;
	return true;
}

/*
 * One hold of the lock of @cpu's per-CPU lists in @zone: stage the pages
 * on them, each list from its tail, blocks of order >= @min_order, at
 * most @max_pages pages.  Every page staged was on a list, so free, while
 * the lock was held.
 */
static void vb_scan_pcp_hold(struct vb_device *vb, struct zone *zone,
			     unsigned int cpu, unsigned int min_order,
			     unsigned long max_pages)
{
	struct vb_scan_state *sc = &vb->hint.scan;
	struct per_cpu_pages *pcp = per_cpu_ptr(zone->per_cpu_pageset, cpu);
	unsigned long taken = 0, pfn, flags;
	struct page *page;
	unsigned int i;
	u64 t0, held;
	int order;

	t0 = local_clock();
	vb_compat_pcp_lock(pcp, &flags);
	for (i = 0; i < NR_PCP_LISTS; i++) {
		order = vb_compat_pcp_order(i);
		if (order < 0 || (unsigned int)order < min_order)
			continue;
		list_for_each_entry_reverse(page, &pcp->lists[i], pcp_list) {
			pfn = page_to_pfn(page);
			if (WARN_ON_ONCE(page_zone(page) != zone ||
					 !zone_spans_pfn(zone, pfn + (1UL << order) - 1)))
				goto out;
			if (taken + (1UL << order) > max_pages ||
			    !vb_scan_pcp_stage(sc, pfn, order))
				goto out;
			taken += 1UL << order;
		}
	}
out:
	vb_compat_pcp_unlock(pcp, &flags);
	held = local_clock() - t0;
	sc->pcp_max_hold_ns = max(sc->pcp_max_hold_ns, held);
}

/*
 * Send the ranges one hold of a per-CPU list lock staged: sorted, merged,
 * into the ranges of the chains.  Returns 0, or an error with which the
 * round stops.
 */
static int vb_scan_pcp_send(struct vb_device *vb, unsigned int *chains,
			    struct vb_scan_walk *w)
{
	struct vb_scan_state *sc = &vb->hint.scan;
	unsigned int i;
	int err = 0;

	sc->pcp_n = vb_scan_merge(sc->pcp_r, sc->pcp_n);
	for (i = 0; i < sc->pcp_n; i++) {
		if (sc->n == sc->max) {
			err = vb_scan_make_room(vb, chains, w);
			if (err)
				break;
		}
		sc->r[sc->n++] = sc->pcp_r[i];
	}
	sc->pcp_n = 0;
	return err;
}

/*
 * The per-CPU lists of every CPU in every populated zone.  Returns 0, or
 * an error with which the round stops.
 */
static int vb_scan_pcp(struct vb_device *vb, unsigned int *chains,
		       struct vb_scan_walk *w)
{
	struct vb_hint *h = &vb->hint;
	struct vb_scan_state *sc = &h->scan;
	unsigned int cpu;
	struct zone *zone;
	int nid, zid, err;

	if (!sc->pcp_r || !h->cur.pcp_max_pages)
		return 0;
	for_each_online_node(nid) {
		for (zid = 0; zid < MAX_NR_ZONES; zid++) {
			zone = &NODE_DATA(nid)->node_zones[zid];
			if (!populated_zone(zone))
				continue;
			for_each_possible_cpu(cpu) {
				if (!w && vb_hint_round_must_stop(vb))
					return -EINTR;
				vb_scan_pcp_hold(vb, zone, cpu,
						 h->cur.min_order,
						 h->cur.pcp_max_pages);
				err = vb_scan_pcp_send(vb, chains, w);
				if (err)
					return err;
				cond_resched();
			}
		}
	}
	return 0;
}

/* Start the counters of a walk of all free lists */
static void vb_scan_begin(struct vb_scan_state *sc, unsigned int max)
{
	sc->n = 0;
	sc->max = max;
	sc->pfns = 0;
	sc->max_hold_ns = 0;
	memset(sc->pend_by_order, 0, sizeof(sc->pend_by_order));
	sc->pcp_n = 0;
	sc->pcp_pfns = 0;
	sc->pcp_max_hold_ns = 0;
}

/* Record the cost of the round that started at @t0 */
static void vb_scan_account(struct vb_device *vb, u64 t0)
{
	struct vb_hint *h = &vb->hint;
	struct vb_scan_state *sc = &h->scan;

	spin_lock(&h->lock);
	h->stats.round_pfns = sc->pfns + sc->pcp_pfns;
	h->stats.round_pcp_pfns = sc->pcp_pfns;
	h->stats.max_pcp_hold_ns = max(h->stats.max_pcp_hold_ns,
				       sc->pcp_max_hold_ns);
	h->stats.round_scan_ns = local_clock() - t0;
	h->stats.round_max_hold_ns = sc->max_hold_ns;
	h->stats.max_hold_ns = max(h->stats.max_hold_ns, sc->max_hold_ns);
	spin_unlock(&h->lock);
}

/*
 * The @k-th free list group of a round: (order, node, zone), largest order
 * first, over @per_order = nr_node_ids * MAX_NR_ZONES zones per order.
 * Returns the zone, or NULL for an offline node or an empty zone.
 */
static struct zone *vb_scan_unit(unsigned int k, unsigned int per_order,
				 int *order, int *nid, int *zid)
{
	struct zone *zone;

	*order = VB_HINT_MAX_ORDER - k / per_order;
	*nid = (k % per_order) / MAX_NR_ZONES;
	*zid = k % MAX_NR_ZONES;
	if (!node_online(*nid))
		return NULL;
	zone = &NODE_DATA(*nid)->node_zones[*zid];
	return populated_zone(zone) ? zone : NULL;
}

/*
 * One scan round: the free lists of every order >= min_order, largest
 * first, of every populated zone, starting where the last round stopped
 * and wrapping around, then the per-CPU lists.
 */
int vb_scan_round(struct vb_device *vb)
{
	struct vb_hint *h = &vb->hint;
	struct vb_scan_state *sc = &h->scan;
	unsigned int min_order = h->cur.min_order;
	unsigned int per_order = nr_node_ids * MAX_NR_ZONES;
	unsigned int total = (VB_HINT_MAX_ORDER - min_order + 1) * per_order;
	unsigned int first, k, chains = 0;
	u64 t0 = local_clock();
	int order = 0, nid = 0, zid = 0, err = 0;
	struct zone *zone;

	first = sc->resume_depth * per_order + sc->resume_nid * MAX_NR_ZONES +
		sc->resume_zid;
	if (first >= total)
		first = 0;
	vb_scan_begin(sc, min(h->cur.blocks_per_chain, h->ring_size - 1));

	for (k = 0; k < total && !err; k++) {
		zone = vb_scan_unit((first + k) % total, per_order, &order,
				    &nid, &zid);
		if (!zone)
			continue;
		err = vb_scan_order(vb, zone, order, &chains, NULL);
	}
	if (err) {
		sc->resume_depth = VB_HINT_MAX_ORDER - order;
		sc->resume_nid = nid;
		sc->resume_zid = zid;
	} else {
		sc->resume_depth = 0;
		sc->resume_nid = 0;
		sc->resume_zid = 0;
		err = vb_scan_pcp(vb, &chains, NULL);
		if (!err) {
			vb_scan_compact(sc);
			err = vb_scan_queue(vb, &chains);
		}
	}
	vb_scan_account(vb, t0);
	return err;
}

#ifdef VB_FAULT_INJECT
/*
 * Test builds: walk all free lists as a round would, queueing nothing, and
 * report what the search alone costs (debugfs scan_walk, vb_fault.c).
 * Caller holds vq_lock, so no round runs meanwhile.
 */
void vb_scan_walk(struct vb_device *vb, struct vb_scan_walk *w)
{
	struct vb_scan_state *sc = &vb->hint.scan;
	unsigned int per_order = nr_node_ids * MAX_NR_ZONES;
	unsigned int total, k;
	u64 t0 = local_clock();
	int order = 0, nid = 0, zid = 0;
	struct zone *zone;

	vb_core_settings_load(vb, &vb->hint.cur);
	memset(w, 0, sizeof(*w));
	vb_scan_begin(sc, VB_HINT_MAX_BPC);
	sc->holds = 0;
	sc->hold_ns = 0;
	memset(sc->hold_hist, 0, sizeof(sc->hold_hist));
	total = (VB_HINT_MAX_ORDER - vb->hint.cur.min_order + 1) * per_order;
	for (k = 0; k < total; k++) {
		zone = vb_scan_unit(k, per_order, &order, &nid, &zid);
		if (zone)
			vb_scan_order(vb, zone, order, NULL, w);
	}
	vb_scan_pcp(vb, NULL, w);
	vb_scan_compact(sc);
	vb_scan_tally(sc, w);
	w->pfns = sc->pfns + sc->pcp_pfns;
	w->pcp_pfns = sc->pcp_pfns;
	w->pcp_max_hold_ns = sc->pcp_max_hold_ns;
	w->ns = local_clock() - t0;
	w->max_hold_ns = sc->max_hold_ns;
	w->holds = sc->holds;
	w->hold_ns = sc->hold_ns;
	memcpy(w->hold_hist, sc->hold_hist, sizeof(w->hold_hist));
}
#endif

/* The staging ranges of the per-CPU list walk (free page hinting only) */
int vb_scan_init(struct vb_device *vb)
{
	struct vb_scan_state *sc = &vb->hint.scan;

	sc->pcp_r = kvmalloc_array(VB_SCAN_PCP_RANGES, sizeof(*sc->pcp_r),
				   GFP_KERNEL);
	return sc->pcp_r ? 0 : -ENOMEM;
}

void vb_scan_exit(struct vb_device *vb)
{
	kvfree(vb->hint.scan.pcp_r);
	vb->hint.scan.pcp_r = NULL;
}
