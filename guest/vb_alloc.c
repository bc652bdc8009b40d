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
 * for them.  They are taken as movable allocations, from movable
 * pageblocks, so that giving them back after DONE leaves no pageblock
 * converted to another migratetype.  No reclaim, no emergency reserves,
 * and never below reserve_kb of free memory.
 */

#include <linux/mm.h>
#include <linux/gfp.h>
#include <linux/slab.h>
#include <linux/vmstat.h>
#include <linux/sched.h>

#include "vb.h"

#define VB_ALLOC_GFP	(__GFP_MOVABLE | __GFP_NORETRY | __GFP_NOWARN | \
			 __GFP_NOMEMALLOC)

/*
 * Allocate one free block of the largest order <= *order that is still
 * available, never below alloc_min_order and never taking free memory
 * below the reserve.  *order only goes down during a round: once an order
 * failed, the larger orders are not retried.
 */
static struct page *vb_alloc_block(struct vb_device *vb, int *order)
{
	const struct vb_hint_settings *s = &vb->hint.cur;
	unsigned long reserve = (unsigned long)s->reserve_kb >> (PAGE_SHIFT - 10);
	unsigned long nr_free;
	struct page *page;

	for (; *order >= (int)s->alloc_min_order; (*order)--) {
		nr_free = global_zone_page_state(NR_FREE_PAGES);
		if (nr_free < reserve + (1UL << *order))
			continue;
		page = alloc_pages(VB_ALLOC_GFP, *order);
		if (page) {
			set_page_private(page, *order);
			return page;
		}
	}
	return NULL;
}

/*
 * Fill and queue one chain of up to blocks_per_chain blocks.  Returns the
 * number of blocks queued, 0 when free memory is exhausted, or a negative
 * error (-EINTR: the round must stop).
 */
static int vb_alloc_send_chain(struct vb_device *vb, int *order)
{
	struct vb_hint *h = &vb->hint;
	unsigned int max = min(h->cur.blocks_per_chain, h->ring_size - 1);
	u64 by_order[VB_HINT_NR_ORDERS] = {};
	struct scatterlist *sgs[1] = { h->sg };
	struct vb_hint_chain *c;
	struct page *page;
	unsigned int i, o;
	int err;

	/* one descriptor per block, plus the slot kept for STOP */
	if (!vb_hint_wait_room(vb, max + 1, true))
		return -EINTR;

	c = vb_hint_chain_alloc();
	if (!c)
		return -ENOMEM;

	sg_init_table(h->sg, max);
	for (i = 0; i < max; i++) {
		page = vb_alloc_block(vb, order);
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

/* One alloc round: take and hold free blocks until none is left */
int vb_alloc_round(struct vb_device *vb)
{
	struct vb_hint *h = &vb->hint;
	unsigned int chains = 0;
	int order = VB_HINT_MAX_ORDER;
	int ret = 0;

	while (!vb_hint_round_must_stop(vb)) {
		ret = vb_alloc_send_chain(vb, &order);
		if (ret <= 0)
			break;
		vb_hint_chain_queued(h, &chains);
		cond_resched();
	}
	return ret < 0 ? ret : 0;
}
