// SPDX-License-Identifier: GPL-2.0
/*
 * vb_alloc.c - the alloc search: take free blocks from the allocator and
 * hold them until the host says DONE, as the in-tree driver does.
 *
 * Safe on any device: a hinted block is the driver's own until the device
 * has used the descriptor chain that carried it (vb_hint.c keeps it "in
 * flight" until then).  Blocks are taken largest order first, from the
 * largest buddy order (mainline's block size) down to alloc_min_order,
 * which defaults to that same order: smaller blocks only when a user asks
 * for them.
 *
 * What is taken.  A held block cannot be migrated, so it must not sit where
 * mm counts on moving pages.  Blocks are allocated with the in-tree
 * driver's flags (VIRTIO_BALLOON_FREE_PAGE_ALLOC_FLAG: __GFP_NORETRY |
 * __GFP_NOWARN | __GFP_NOMEMALLOC; no reclaim, no compaction, no kswapd
 * wakeup, no emergency reserves) and never __GFP_MOVABLE: an unmovable
 * request is served from ZONE_NORMAL and the zones below it, never from
 * ZONE_MOVABLE, whose memory blocks stay offlinable, and never from CMA
 * pageblocks.  A block of pageblock_order or more that mm finds in a movable
 * pageblock turns that pageblock unmovable (the allocator's fallback), so
 * compaction and contiguous allocations do not count on it; blocks smaller
 * than a pageblock (alloc_min_order lowered) follow the fallback rules of
 * any kernel allocation.
 *
 * Watermarks.  Each zone is kept at or above its high watermark, plus its
 * lowmem reserve against ZONE_NORMAL requests, plus reserve_kb.  Zones are
 * searched one at a time, each node's from ZONE_NORMAL down, the
 * allocation steered to the zone with __GFP_THISNODE and the zone's
 * modifier (a zone with no free block of the order asked for may still
 * hand out one of a lower zone of that node).  A block is asked for only
 * while the zone's free pages minus the block stay above its floor, and
 * kept only if the zone it came from is still at or above its floor; one
 * that left a zone below gives the zone up for the rest of the round and
 * goes back at once (it was never sent).  Free pages are counted as mm's
 * watermark checks count them for this request, exactly: every CPU's
 * pending counter delta added (zone_page_state_snapshot(); the plain
 * counter may be short by up to 125 pages per CPU, more than the floor
 * above the high watermark at a hundred CPUs), free CMA pages, the
 * highatomic reserve and unaccepted memory left out
 * (vb_mm_zone_unusable_free()).
 *
 * In flight.  A block the device has not used yet cannot be given back
 * under memory pressure (the shrinker frees only acked blocks), so a round
 * keeps at most alloc_max_inflight_kb of blocks in flight: a chain takes
 * blocks only while a block of the largest order still fits under the cap,
 * and waits for the device to use buffers when none does, as it waits for
 * ring room (inflight_waits; a round that waits 2 s with no buffer coming
 * back ends).
 */

#include <linux/mm.h>
#include <linux/mmzone.h>
#include <linux/gfp.h>
#include <linux/nodemask.h>
#include <linux/slab.h>
#include <linux/vmstat.h>
#include <linux/sched.h>

#include "vb.h"

/* The in-tree driver's VIRTIO_BALLOON_FREE_PAGE_ALLOC_FLAG */
#define VB_ALLOC_GFP	(__GFP_NORETRY | __GFP_NOWARN | __GFP_NOMEMALLOC)

/* Highest zone an unmovable request may use: the class of every request */
#define VB_ALLOC_TOP_ZONE	ZONE_NORMAL

/*
 * Where a round looks for the next block: node, zone (VB_ALLOC_TOP_ZONE
 * down to 0), and the order, which only goes down within a zone: once an
 * order failed there, larger ones are not retried.
 */
struct vb_alloc_cursor {
	int nid;
	int zid;
	int order;
};

/* The zone modifier that makes @zid the highest zone of a request */
static gfp_t vb_alloc_zone_gfp(int zid)
{
	switch (zid) {
#ifdef CONFIG_ZONE_DMA
	case ZONE_DMA:
		return __GFP_DMA;
#endif
#ifdef CONFIG_ZONE_DMA32
	case ZONE_DMA32:
		return __GFP_DMA32;
#endif
	default:
		return 0;
	}
}

/*
 * Free pages of @zone an unmovable request can use: the free pages, read
 * with every CPU's pending counter delta (zone_page_state() alone may be
 * off by the stat threshold, up to 125 pages, per CPU), less what mm's
 * watermark checks do not count as usable (CMA, the highatomic reserve,
 * unaccepted memory).  0 while memory goes offline (the zone's per-CPU
 * counters may be freed): the round leaves the zone alone.
 */
static unsigned long vb_alloc_zone_free(struct zone *zone)
{
	unsigned long free, unusable;
	struct vb_mm_hold mh;

	if (!vb_mm_hold_begin(&mh))
		return 0;
	free = zone_page_state_snapshot(zone, NR_FREE_PAGES);
	unusable = vb_mm_zone_unusable_free(zone);
	vb_mm_hold_end(&mh);
	return free > unusable ? free - unusable : 0;
}

/* Free pages @zone keeps: high watermark, lowmem reserve, @reserve */
static unsigned long vb_alloc_zone_floor(struct zone *zone,
					 unsigned long reserve)
{
	long lowmem = zone->lowmem_reserve[VB_ALLOC_TOP_ZONE];

	return high_wmark_pages(zone) + max(lowmem, 0L) + reserve;
}

/* Next zone of the node, or the top zone of the next node */
static void vb_alloc_next_zone(struct vb_alloc_cursor *cur)
{
	if (cur->zid > 0) {
		cur->zid--;
	} else {
		cur->nid++;
		cur->zid = VB_ALLOC_TOP_ZONE;
	}
	cur->order = VB_HINT_MAX_ORDER;
}

/*
 * One block from the zone under the cursor, of the largest order <=
 * cur->order that the zone can spare, or NULL when the zone has none left
 * for this round.
 */
static struct page *vb_alloc_zone_block(struct vb_device *vb,
					struct vb_alloc_cursor *cur,
					struct zone *zone)
{
	const struct vb_hint_settings *s = &vb->hint.cur;
	unsigned long reserve = (unsigned long)s->reserve_kb >>
				(PAGE_SHIFT - 10);
	gfp_t gfp = VB_ALLOC_GFP | __GFP_THISNODE | vb_alloc_zone_gfp(cur->zid);
	struct zone *got;
	struct page *page;

	for (; cur->order >= (int)s->alloc_min_order; cur->order--) {
		if (vb_alloc_zone_free(zone) < vb_alloc_zone_floor(zone, reserve) +
					       (1UL << cur->order))
			continue;
		page = alloc_pages_node(cur->nid, gfp, cur->order);
		if (!page)
			continue;
		got = page_zone(page);
		if (vb_alloc_zone_free(got) >= vb_alloc_zone_floor(got, reserve)) {
			set_page_private(page, cur->order);
			return page;
		}
		/* it took @got below its floor: never sent, give it back */
		__free_pages(page, cur->order);
		if (got == zone)
			break;
	}
	return NULL;
}

/* The next block of the round, or NULL when every zone is done */
static struct page *vb_alloc_block(struct vb_device *vb,
				   struct vb_alloc_cursor *cur)
{
	struct zone *zone;
	struct page *page;

	for (; (unsigned int)cur->nid < nr_node_ids; vb_alloc_next_zone(cur)) {
		if (!node_online(cur->nid))
			continue;
		zone = &NODE_DATA(cur->nid)->node_zones[cur->zid];
		if (!populated_zone(zone))
			continue;
		page = vb_alloc_zone_block(vb, cur, zone);
		if (page)
			return page;
	}
	return NULL;
}

/*
 * Fill and queue one chain of up to blocks_per_chain blocks.  Returns the
 * number of blocks queued, 0 when free memory is exhausted, or a negative
 * error (-EINTR: the round must stop).
 */
static int vb_alloc_send_chain(struct vb_device *vb,
			       struct vb_alloc_cursor *cur)
{
	struct vb_hint *h = &vb->hint;
	unsigned int max = min(h->cur.blocks_per_chain, h->ring_size - 1);
	unsigned long cap = (unsigned long)h->cur.alloc_max_inflight_kb >>
			    (PAGE_SHIFT - 10);
	unsigned long block = 1UL << VB_HINT_MAX_ORDER;
	u64 by_order[VB_HINT_NR_ORDERS] = {};
	struct scatterlist *sgs[1] = { h->sg };
	struct vb_hint_chain *c;
	struct page *page;
	unsigned int i, o;
	int err;

	/*
	 * One descriptor per block, plus the slot kept for STOP; and room
	 * under the in-flight cap for one block of any order (the knob's
	 * range keeps cap >= block).
	 */
	if (!vb_hint_wait_room(vb, max + 1, cap - block, true))
		return -EINTR;

	c = vb_hint_chain_alloc();
	if (!c)
		return -ENOMEM;

	sg_init_table(h->sg, max);
	for (i = 0; i < max; i++) {
		/* vq_lock held: only this worker changes inflight_pages */
		if (h->inflight_pages + c->nr_pages + block > cap)
			break;
		page = vb_alloc_block(vb, cur);
		if (!page)
			break;
		o = vb_hint_block_order(page);
		sg_set_page(&h->sg[i], page, PAGE_SIZE << o, 0);
		vb_hint_chain_add_block(c, page);
		by_order[o]++;
	}
	if (!i) {
		kfree(c);
		return 0;
	}
	sg_mark_end(&h->sg[i - 1]);

	err = vb_hint_queue(vb, c, sgs, 0, 1);
	if (err) {
		/* never seen by the device: safe to free right away */
		vb_hint_block_list_free(&c->blocks);
		kfree(c);
		return err;
	}

	vb_hint_count_chain(h, i, (u64)c->nr_pages << PAGE_SHIFT, by_order);
	return i;
}

/* One alloc round: take and hold free blocks until no zone can spare one */
int vb_alloc_round(struct vb_device *vb)
{
	struct vb_alloc_cursor cur = {
		.nid = 0,
		.zid = VB_ALLOC_TOP_ZONE,
		.order = VB_HINT_MAX_ORDER,
	};
	struct vb_hint *h = &vb->hint;
	unsigned int chains = 0;
	int ret = 0;

	while (!vb_hint_round_must_stop(vb)) {
		ret = vb_alloc_send_chain(vb, &cur);
		if (ret <= 0)
			break;
		vb_hint_chain_queued(h, &chains);
		cond_resched();
	}
	return ret < 0 ? ret : 0;
}
