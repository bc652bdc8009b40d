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
 * A round walks the PFNs of every populated zone and reports the free
 * buddy blocks (PageBuddy, order in page_private) of order >= min_order.
 * Adjacent free blocks are merged into one range (one descriptor, up to
 * 1 GiB).  Nothing is allocated, zeroed or held.
 *
 * Bounded holds.  The buddy state is read under zone->lock, which is taken
 * with IRQs off.  One hold does at most VB_SCAN_STEPS_PER_LOCK steps (a
 * step is one PFN in use or one free block of any order) and ends early
 * when another CPU waits for the lock (spin_needbreak()).  local_clock()
 * around every hold gives the longest one, reported in the counters.
 *
 * Coverage.  A round starts where the previous one stopped (node, zone,
 * PFN) and wraps around to it, so rounds cut short by the host (every
 * dirty bitmap sync of a big guest ends one) still cover memory evenly.
 *
 * Memory hotplug.  Nothing of a PFN's memmap is read before the PFN is
 * known to be in the zone's span (zone_spans_pfn()) and online
 * (pfn_to_online_page(), asked for every PFN under zone->lock: sections
 * and subsections come and go, ZONE_DEVICE has holes).  page_zone() then
 * rules out an overlapping zone.  An offline PFN is stepped over to the
 * end of its subsection, the unit in which online state and memmap
 * validity change.
 */

#include <linux/mm.h>
#include <linux/mmzone.h>
#include <linux/memory_hotplug.h>
#include <linux/nodemask.h>
#include <linux/sched.h>
#include <linux/sched/clock.h>
#include <linux/spinlock.h>
#include <linux/log2.h>

#include "vb.h"

/* Move the open range to the closed ranges (there is room for it) */
static void vb_scan_close(struct vb_scan_state *sc)
{
	unsigned int o;

	if (!sc->nr)
		return;
	sc->r_pfn[sc->n] = sc->start;
	sc->r_nr[sc->n] = sc->nr;
	sc->n++;
	for (o = 0; o < VB_HINT_NR_ORDERS; o++) {
		sc->pend_by_order[o] += sc->open_by_order[o];
		sc->open_by_order[o] = 0;
	}
	sc->nr = 0;
}

/* Would a free block at @pfn of @nr pages extend the open range? */
static bool vb_scan_extends(const struct vb_scan_state *sc, unsigned long pfn,
			    unsigned long nr)
{
	return sc->nr && sc->start + sc->nr == pfn &&
	       sc->nr + nr <= VB_SCAN_MAX_RANGE;
}

/*
 * One hold of zone->lock: walk @zone from *@pfnp (below @end) for at most
 * VB_SCAN_STEPS_PER_LOCK steps.  Stops early when the closed ranges are
 * full (the caller queues them) or another CPU wants the lock.  The buddy
 * state only changes under zone->lock, so every block recorded was free
 * at that time.
 */
static void vb_scan_step(struct vb_device *vb, struct zone *zone,
			 unsigned long *pfnp, unsigned long end)
{
	struct vb_scan_state *sc = &vb->hint.scan;
	unsigned int min_order = vb->hint.cur.min_order;
	unsigned long pfn = *pfnp, steps = 0, flags, nr;
	unsigned int order;
	struct page *page;
	u64 t0, held;

	t0 = local_clock();
	spin_lock_irqsave(&zone->lock, flags);
	while (pfn < end && steps < VB_SCAN_STEPS_PER_LOCK) {
		if (steps++ && spin_needbreak(&zone->lock))
			break;
		if (!zone_spans_pfn(zone, pfn)) {
			pfn = end;	/* the zone shrank */
			break;
		}
		page = pfn_to_online_page(pfn);
		if (!page) {
			pfn = ALIGN(pfn + 1, PAGES_PER_SUBSECTION);
			continue;
		}
		if (page_zone(page) != zone || !PageBuddy(page)) {
			pfn++;
			continue;
		}
		order = vb_compat_buddy_order(page);
		if (order > VB_HINT_MAX_ORDER) {
			pfn++;
			continue;
		}
		nr = 1UL << order;
		if (order >= min_order) {
			if (!vb_scan_extends(sc, pfn, nr)) {
				if (sc->n == sc->max)
					break;	/* queue first, then this one */
				vb_scan_close(sc);
				sc->start = pfn;
			}
			sc->nr += nr;
			sc->open_by_order[order]++;
		}
		pfn += nr;
	}
	spin_unlock_irqrestore(&zone->lock, flags);
	held = local_clock() - t0;

	pfn = min(pfn, end);
	sc->pfns += pfn - *pfnp;
	sc->max_hold_ns = max(sc->max_hold_ns, held);
	sc->holds++;
	sc->hold_ns += held;
	sc->hold_hist[min_t(unsigned int, ilog2((held >> 10) | 1),
			    VB_SCAN_HOLD_HIST - 1)]++;
	*pfnp = pfn;
}

/*
 * Queue the closed ranges as one chain.  Returns 0, or -EINTR when the
 * round must stop (the ranges are dropped: nothing is held).
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
	if (!vb_hint_wait_room(vb, sc->n + 1, true))
		return -EINTR;
	c = vb_hint_chain_alloc();
	if (!c)
		return -ENOMEM;

	sg_init_table(h->sg, sc->n);
	for (i = 0; i < sc->n; i++) {
		sg_set_page(&h->sg[i], pfn_to_page(sc->r_pfn[i]),
			    sc->r_nr[i] << PAGE_SHIFT, 0);
		bytes += (u64)sc->r_nr[i] << PAGE_SHIFT;
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

/*
 * Walk [@pfn, @end) of @zone.  On -EINTR the round stops: the next one
 * resumes at the first PFN whose free blocks were not queued.
 */
static int vb_scan_zone(struct vb_device *vb, struct zone *zone,
			unsigned long pfn, unsigned long end,
			unsigned int *chains, unsigned long *stopped)
{
	struct vb_scan_state *sc = &vb->hint.scan;
	unsigned long from = pfn;
	int err = 0;

	while (pfn < end) {
		if (vb_hint_round_must_stop(vb)) {
			err = -EINTR;
			break;
		}
		vb_scan_step(vb, zone, &pfn, end);
		if (sc->n == sc->max) {
			err = vb_scan_queue(vb, chains);
			if (err)
				break;
		}
		cond_resched();
	}
	if (err) {
		/* what is pending in this zone was not sent: start there */
		if (sc->n && sc->r_pfn[0] >= from && sc->r_pfn[0] < pfn)
			pfn = sc->r_pfn[0];
		else if (sc->nr && sc->start >= from && sc->start < pfn)
			pfn = sc->start;
		*stopped = pfn;
	}
	return err;
}

/* Record the cost of the round that walked sc->pfns PFNs since @t0 */
static void vb_scan_account(struct vb_device *vb, u64 t0)
{
	struct vb_hint *h = &vb->hint;
	struct vb_scan_state *sc = &h->scan;

	spin_lock(&h->lock);
	h->stats.round_pfns = sc->pfns;
	h->stats.round_scan_ns = local_clock() - t0;
	h->stats.round_max_hold_ns = sc->max_hold_ns;
	h->stats.max_hold_ns = max(h->stats.max_hold_ns, sc->max_hold_ns);
	spin_unlock(&h->lock);
}

/*
 * One scan round: every populated zone of every online node, in (node,
 * zone, PFN) order, starting where the last round stopped and wrapping
 * around to that point.
 */
int vb_scan_round(struct vb_device *vb)
{
	struct vb_hint *h = &vb->hint;
	struct vb_scan_state *sc = &h->scan;
	unsigned int total = nr_node_ids * MAX_NR_ZONES;
	unsigned int first, k, idx, chains = 0;
	unsigned long from, to, resume, stopped = 0;
	u64 t0 = local_clock();
	struct zone *zone;
	int nid, zid, err = 0;

	first = sc->resume_nid * MAX_NR_ZONES + sc->resume_zid;
	if (first >= total)
		first = 0;
	resume = sc->resume_pfn;
	memset(sc->r_pfn, 0, sizeof(sc->r_pfn));
	sc->n = 0;
	sc->nr = 0;
	sc->pfns = 0;
	sc->max_hold_ns = 0;
	memset(sc->open_by_order, 0, sizeof(sc->open_by_order));
	memset(sc->pend_by_order, 0, sizeof(sc->pend_by_order));
	sc->max = min(h->cur.blocks_per_chain, h->ring_size - 1);

	/* k == total is the start zone again, below the resume PFN */
	for (k = 0; k <= total && !err; k++) {
		idx = (first + k) % total;
		nid = idx / MAX_NR_ZONES;
		zid = idx % MAX_NR_ZONES;
		if (!node_online(nid))
			continue;
		zone = &NODE_DATA(nid)->node_zones[zid];
		if (!populated_zone(zone))
			continue;
		from = zone->zone_start_pfn;
		to = zone_end_pfn(zone);
		if (k == 0)
			from = clamp(resume, from, to);
		if (k == total)
			to = clamp(resume, from, to);
		err = vb_scan_zone(vb, zone, from, to, &chains, &stopped);
		if (err) {
			sc->resume_nid = nid;
			sc->resume_zid = zid;
			sc->resume_pfn = stopped;
		}
	}
	/* the open range may need the room of a full set of closed ones */
	if (!err && sc->nr && sc->n == sc->max)
		err = vb_scan_queue(vb, &chains);
	if (!err) {
		vb_scan_close(sc);
		err = vb_scan_queue(vb, &chains);
	}
	vb_scan_account(vb, t0);
	return err;
}

#ifdef VB_FAULT_INJECT
/*
 * Test builds: walk all memory as a round would, queueing nothing, and
 * report what the search alone costs (debugfs scan_walk, vb_fault.c).
 * Caller holds vq_lock, so no round runs meanwhile.
 */
void vb_scan_walk(struct vb_device *vb, struct vb_scan_walk *w)
{
	struct vb_scan_state *sc = &vb->hint.scan;
	unsigned long pfn, end;
	u64 t0 = local_clock();
	struct zone *zone;
	unsigned int i;
	int nid, zid;

	vb_core_settings_load(vb, &vb->hint.cur);
	memset(w, 0, sizeof(*w));
	sc->n = 0;
	sc->nr = 0;
	sc->pfns = 0;
	sc->max_hold_ns = 0;
	sc->holds = 0;
	sc->hold_ns = 0;
	memset(sc->hold_hist, 0, sizeof(sc->hold_hist));
	sc->max = VB_HINT_MAX_BPC;
	for_each_online_node(nid) {
		for (zid = 0; zid < MAX_NR_ZONES; zid++) {
			zone = &NODE_DATA(nid)->node_zones[zid];
			if (!populated_zone(zone))
				continue;
			pfn = zone->zone_start_pfn;
			end = zone_end_pfn(zone);
			while (pfn < end) {
				vb_scan_step(vb, zone, &pfn, end);
				if (sc->n == sc->max) {
					for (i = 0; i < sc->n; i++)
						w->free_pages += sc->r_nr[i];
					w->ranges += sc->n;
					sc->n = 0;
				}
				cond_resched();
			}
		}
	}
	if (sc->nr && sc->n == sc->max)
		sc->n = 0;
	vb_scan_close(sc);
	for (i = 0; i < sc->n; i++)
		w->free_pages += sc->r_nr[i];
	w->ranges += sc->n;
	sc->n = 0;
	memset(sc->open_by_order, 0, sizeof(sc->open_by_order));
	memset(sc->pend_by_order, 0, sizeof(sc->pend_by_order));
	w->pfns = sc->pfns;
	w->ns = local_clock() - t0;
	w->max_hold_ns = sc->max_hold_ns;
	w->holds = sc->holds;
	w->hold_ns = sc->hold_ns;
	memcpy(w->hold_hist, sc->hold_hist, sizeof(w->hold_hist));
}
#endif
