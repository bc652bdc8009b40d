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
 * Scan reads nothing of mm itself.  vb_mm_walk() (vb_mm.c, the one place
 * that reads mm's free lists) walks the buddy free lists, largest order
 * first, then the per-CPU lists, in bounded holds of their locks, and
 * hands out, with no lock held, ranges of pages that were free while it
 * held the lock; this file only turns them into descriptors.  A round
 * costs what it finds: nothing is allocated, zeroed or held.
 *
 * Ranges wait in the state's r[]: a range next to the last one extends
 * it; when all of them are used they are sorted and adjacent or
 * overlapping ones merged (up to 1 GiB a range), and only when that frees
 * less than a quarter of them are they queued as one chain.  A page
 * handed out twice (it was free both times) is merged with its copy when
 * both wait in the same ranges, else sent twice; a page the walk missed
 * is sent.
 *
 * Coverage.  A round starts at the (order, node, zone) group where the
 * previous one stopped and wraps around, so rounds cut short by the host
 * (every dirty bitmap sync of a big guest ends one) still cover memory
 * evenly; a round that got through every group lets the next one start
 * at the largest order.  The per-CPU lists are a phase of their own at the
 * end of a round: a round cut short before it leaves them to the next
 * round's end.
 */

#include <linux/mm.h>
#include <linux/sched/clock.h>
#include <linux/scatterlist.h>
#include <linux/sort.h>
#include <linux/slab.h>

#include "vb.h"

/* Sort the ranges and merge those that touch or overlap (up to 1 GiB) */
static void vb_scan_compact(struct vb_scan_state *sc)
{
	struct vb_mm_range *r = sc->r, *last;
	unsigned int i, n = 0;
	unsigned long end;

	if (sc->n < 2)
		return;
	sort(r, sc->n, sizeof(*r), vb_mm_range_cmp, NULL);
	for (i = 1; i < sc->n; i++) {
		last = &r[n];
		end = max(last->pfn + last->nr, r[i].pfn + r[i].nr);
		if (r[i].pfn <= last->pfn + last->nr &&
		    end - last->pfn <= VB_MM_MAX_RANGE) {
			last->nr = end - last->pfn;
			continue;
		}
		r[++n] = r[i];
	}
	sc->n = n + 1;
}

/* The ranges are on their way (or counted): start the next chain's */
static void vb_scan_reset(struct vb_scan_state *sc)
{
	sc->n = 0;
	memset(sc->pend_by_order, 0, sizeof(sc->pend_by_order));
}

/*
 * Queue the ranges as one chain.  Returns 0, or -EINTR when the round must
 * stop (the ranges are dropped: nothing is held).
 */
static int vb_scan_queue(struct vb_device *vb)
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

	for (i = 0; i < sc->n; i++)
		vb_fault_note_hinted(vb, sc->r[i].pfn, sc->r[i].nr);
	vb_hint_count_chain(h, sc->n, bytes, sc->pend_by_order);
	vb_scan_reset(sc);
	vb_hint_chain_queued(h, &sc->chains);
	return 0;
}

#ifdef VB_FAULT_INJECT
/* The walk of the test build sends nothing: it counts what it would send */
static void vb_scan_tally(struct vb_scan_state *sc)
{
	unsigned int i;

	for (i = 0; i < sc->n; i++)
		sc->tally->free_pages += sc->r[i].nr;
	sc->tally->ranges += sc->n;
	vb_scan_reset(sc);
}
#else
static void vb_scan_tally(struct vb_scan_state *sc)
{
}
#endif

/*
 * The ranges are all used: merge them, and when that frees less than a
 * quarter of them send them as a chain, or count them (the test build's
 * walk).  Returns 0, or an error with which the round stops.
 */
static int vb_scan_make_room(struct vb_device *vb)
{
	struct vb_scan_state *sc = &vb->hint.scan;

	vb_scan_compact(sc);
	if (sc->n < sc->max && sc->n <= sc->max - sc->max / 4)
		return 0;
	if (sc->tally) {
		vb_scan_tally(sc);
		return 0;
	}
	return vb_scan_queue(vb);
}

static struct vb_device *vb_scan_device(struct vb_mm_walk *w)
{
	return container_of(w, struct vb_device, hint.scan.walk);
}

/*
 * vb_mm_walk() found a range of free pages: add it to the ranges of the
 * next chain, making room first when they are all used.  Returns 0, or
 * an error with which the round stops.
 */
static int vb_scan_range(struct vb_mm_walk *w, const struct vb_mm_range *r,
			 unsigned int order)
{
	struct vb_device *vb = vb_scan_device(w);
	struct vb_scan_state *sc = &vb->hint.scan;
	int err;

	if (sc->n == sc->max) {
		err = vb_scan_make_room(vb);
		if (err)
			return err;
	}
	sc->pend_by_order[order] += r->nr >> order;
	if (sc->n && vb_mm_range_extend(&sc->r[sc->n - 1], r->pfn, r->nr))
		return 0;
	sc->r[sc->n++] = *r;
	return 0;
}

static bool vb_scan_stop(struct vb_mm_walk *w)
{
	return vb_hint_round_must_stop(vb_scan_device(w));
}

/* Set up a walk of every free list with the round's settings */
static void vb_scan_begin(struct vb_device *vb, unsigned int max)
{
	struct vb_scan_state *sc = &vb->hint.scan;

	vb_scan_reset(sc);
	sc->max = max;
	sc->chains = 0;
	sc->walk.min_order = vb->hint.cur.min_order;
	sc->walk.pcp_max_pages = vb->hint.cur.pcp_max_pages;
	sc->walk.range = vb_scan_range;
}

/* Record the cost of the round that started at @t0 */
static void vb_scan_account(struct vb_device *vb, u64 t0)
{
	struct vb_hint *h = &vb->hint;
	struct vb_mm_walk *w = &h->scan.walk;

	spin_lock(&h->lock);
	h->stats.round_pfns = w->pfns + w->pcp_pfns;
	h->stats.round_pcp_pfns = w->pcp_pfns;
	h->stats.max_pcp_hold_ns = max(h->stats.max_pcp_hold_ns,
				       w->pcp_max_hold_ns);
	h->stats.round_scan_ns = local_clock() - t0;
	h->stats.round_max_hold_ns = w->max_hold_ns;
	h->stats.max_hold_ns = max(h->stats.max_hold_ns, w->max_hold_ns);
	spin_unlock(&h->lock);
}

/*
 * One scan round: every free list, from the group where the last round
 * stopped, the ranges queued as chains.
 */
int vb_scan_round(struct vb_device *vb)
{
	struct vb_hint *h = &vb->hint;
	struct vb_scan_state *sc = &h->scan;
	u64 t0 = local_clock();
	int err;

	vb_scan_begin(vb, min(h->cur.blocks_per_chain, h->ring_size - 1));
	sc->walk.stop = vb_scan_stop;
	err = vb_mm_walk(&sc->walk);
	if (!err) {
		vb_scan_compact(sc);
		err = vb_scan_queue(vb);
	}
	vb_scan_account(vb, t0);
	return err;
}

#ifdef VB_FAULT_INJECT
/*
 * Test builds: walk all free lists as a round would, from the largest
 * order, queueing nothing, and report what the search alone costs
 * (debugfs scan_walk, vb_fault.c).  Caller holds vq_lock, so no round
 * runs meanwhile; where the next round starts is left as it was.
 */
void vb_scan_walk(struct vb_device *vb, struct vb_scan_walk *out)
{
	struct vb_scan_state *sc = &vb->hint.scan;
	struct vb_mm_walk *w = &sc->walk;
	unsigned int start = w->start;
	u64 t0 = local_clock();

	vb_core_settings_load(vb, &vb->hint.cur);
	memset(out, 0, sizeof(*out));
	vb_scan_begin(vb, VB_HINT_MAX_BPC);
	sc->tally = out;
	w->stop = NULL;
	w->start = 0;
	vb_mm_walk(w);
	vb_scan_compact(sc);
	vb_scan_tally(sc);
	sc->tally = NULL;
	w->start = start;
	out->pfns = w->pfns + w->pcp_pfns;
	out->pcp_pfns = w->pcp_pfns;
	out->pcp_max_hold_ns = w->pcp_max_hold_ns;
	out->pcp_holds = w->pcp_holds;
	out->isolated_free = w->isolated_free;
	out->isolated_taken = w->isolated_taken;
	out->ns = local_clock() - t0;
	out->max_hold_ns = w->max_hold_ns;
	out->holds = w->holds;
	out->hold_ns = w->hold_ns;
	memcpy(out->hold_hist, w->hold_hist, sizeof(out->hold_hist));
}
#endif

/* The walk's staging ranges (free page hinting only) */
int vb_scan_init(struct vb_device *vb)
{
	return vb_mm_walk_init(&vb->hint.scan.walk);
}

void vb_scan_exit(struct vb_device *vb)
{
	vb_mm_walk_destroy(&vb->hint.scan.walk);
}
