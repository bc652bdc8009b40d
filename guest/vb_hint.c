// SPDX-License-Identifier: GPL-2.0
/*
 * vb_hint.c - free page hinting (VIRTIO_BALLOON_F_FREE_PAGE_HINT).
 *
 * Protocol: the host writes a command id (>= 0x80000000) to config space
 * and raises a config interrupt.  A round then is:
 *
 *   outbuf(cmd id)  inbuf(range, range, ...)  ...  outbuf(STOP)
 *
 * The round ends when we have reported all free memory or the host
 * changes the id (STOP or a new id).  DONE ends hinting for the migration.
 *
 * Two modes find the free memory (knob "mode", module parameter hint_mode):
 *
 * scan (default).  Walk the PFNs of every populated zone and report the
 * free buddy blocks (PageBuddy, order in page_private) of order >=
 * min_order, reading them under zone->lock, VB_HINT_SCAN_PFNS_PER_LOCK
 * PFNs per hold.  Adjacent free blocks are merged into one range (one
 * descriptor, up to 1 GiB).  The blocks stay in the allocator: nothing is
 * allocated, zeroed, or held, so a round costs a read of the memmap (a
 * free block of any order is stepped over at once), puts no pressure on
 * the guest, needs no headroom, and finds free memory down to order 0.
 * The allocating driver pays for zeroing every block it takes
 * (init_on_alloc, default on in Debian) and, in never-touched memory, for
 * the host populating it: about 1 s per GiB under TCG.
 *
 *   Why it is safe.  The virtio spec (free page hinting) lets a driver
 *   reuse a hinted page at any time, even before the device used the
 *   buffer, and requires the device to preserve any write the guest makes
 *   to a hinted page after the device issued the command id.  A block we
 *   report was free when we read it under zone->lock, after we had read
 *   the command id, so after the device issued it: what the page held is
 *   dead, and every later write is the device's to keep (our QEMU series
 *   and stock QEMU both stop taking hints before each dirty bitmap sync
 *   and issue a new id after it; Documentation/data-safety.md).  What scan
 *   cannot keep is a free page's content, so it is refused when the guest
 *   relies on that: page poisoning or init_on_free (alloc is used, and the
 *   allocator checks and re-poisons the pages it hands out and takes
 *   back).  It is also refused when the device negotiated HINT_HOLD, which
 *   promises that hinted pages stay untouched until their buffer is used.
 *
 * alloc.  Take free blocks from the allocator, largest order first down to
 * min_order, without reclaim and never below reserve_kb of free memory,
 * and hold them until DONE, as the in-tree driver does (which takes only
 * order-10 blocks).  Data safety: a block is handed back to the allocator
 * only after the device has used the descriptor chain that carried it:
 * its blocks are "in flight" (hint.inflight) until virtqueue_get_buf()
 * returns the chain, then "acked" (hint.acked).  Only acked blocks go back
 * to mm (shrinker, DONE).  On remove/freeze the device is reset first;
 * after a reset it uses no buffer, so every block may be freed.
 *
 * Both modes: up to blocks_per_chain ranges per descriptor chain and
 * chains_per_kick chains per notification; a full ring is waited on (vq
 * callback, 10 ms poll), never spun on, and nothing found is dropped
 * unsent while the round lasts.
 *
 * Locking: hint.vq_lock (mutex) serializes the free page vq between the
 * worker and the shrinker (which only trylocks it).  hint.lock (spinlock)
 * protects the block lists, page counts and stats; it is never held while
 * allocating memory.  zone->lock is held only to read the buddy state.
 */

#include <linux/mm.h>
#include <linux/gfp.h>
#include <linux/slab.h>
#include <linux/vmstat.h>
#include <linux/ktime.h>
#include <linux/sched.h>
#include <linux/sched/task.h>
#include <linux/fs.h>
#include <linux/fs_struct.h>
#include <linux/pid.h>
#include <linux/path.h>
#include <linux/pagemap.h>
#include <linux/debugfs.h>
#include <linux/uaccess.h>
#include <linux/seq_file.h>
#include <linux/string.h>
#include <linux/delay.h>
#include <linux/sizes.h>
#include <linux/log2.h>
#include <linux/nodemask.h>
#include <linux/mmzone.h>
#include <linux/memory_hotplug.h>

#include "vb.h"

#define VB_HINT_GFP		(__GFP_NORETRY | __GFP_NOWARN | __GFP_NOMEMALLOC)
/* poll period when waiting for the device to return buffers */
#define VB_HINT_POLL_MS		10
/* how long a round waits for its chains to come back after STOP */
#define VB_HINT_ROUND_DRAIN_MS	1000
/* how long DONE waits for in-flight chains before waiting for the vq */
#define VB_HINT_DONE_DRAIN_MS	2000
/* how long a command buffer or a fault chain waits for ring space */
#define VB_HINT_CMD_WAIT_MS	1000

static void vb_fault_inject_round(struct vb_device *vb);

/* Blocks: the buddy order lives in page_private() of the first page */

static unsigned int vb_hint_block_order(struct page *page)
{
	return page_private(page);
}

static void vb_hint_block_free(struct page *page)
{
	unsigned int order = vb_hint_block_order(page);

	set_page_private(page, 0);
	__free_pages(page, order);
}

static void vb_hint_block_list_free(struct list_head *list)
{
	struct page *page, *next;

	list_for_each_entry_safe(page, next, list, lru) {
		list_del(&page->lru);
		vb_hint_block_free(page);
	}
}

static struct vb_hint_chain *vb_hint_chain_alloc(void)
{
	struct vb_hint_chain *c = kzalloc(sizeof(*c), GFP_KERNEL);

	if (c)
		INIT_LIST_HEAD(&c->blocks);
	return c;
}

static void vb_hint_chain_add_block(struct vb_hint_chain *c, struct page *page)
{
	list_add_tail(&page->lru, &c->blocks);
	c->nr_pages += 1UL << vb_hint_block_order(page);
	c->nr_blocks++;
}

/* Command id from config space; re-read only after a config change */
static u32 vb_hint_cmd_id_received(struct vb_device *vb)
{
	struct vb_hint *h = &vb->hint;

	if (test_and_clear_bit(VB_HINT_F_CMD_CHANGED, &h->flags)) {
		virtio_cread_le(vb->vdev, struct vb_wire_config,
				free_page_hint_cmd_id, &h->cmd_id_received);
		spin_lock(&h->lock);
		h->stats.cmd_id = h->cmd_id_received;
		spin_unlock(&h->lock);
	}
	return h->cmd_id_received;
}

/*
 * Collect the chains the device has used: their blocks become acked.
 * Caller holds vq_lock.
 */
static unsigned int vb_hint_reap(struct vb_device *vb)
{
	struct vb_hint *h = &vb->hint;
	struct vb_hint_chain *c;
	unsigned int len, n = 0;

	if (!h->vq)
		return 0;
	while ((c = virtqueue_get_buf(h->vq, &len))) {
		spin_lock(&h->lock);
		list_del(&c->node);
		list_splice_tail_init(&c->blocks, &h->acked);
		h->inflight_pages -= c->nr_pages;
		h->acked_pages += c->nr_pages;
		spin_unlock(&h->lock);
		kfree(c);
		n++;
	}
	return n;
}

/* Give up to @max_pages acked pages back to the page allocator */
static unsigned long vb_hint_free_acked(struct vb_device *vb,
					unsigned long max_pages, bool early)
{
	struct vb_hint *h = &vb->hint;
	unsigned long freed = 0, blocks = 0;
	struct page *page;
	LIST_HEAD(list);

	spin_lock(&h->lock);
	while (freed < max_pages && !list_empty(&h->acked)) {
		page = list_first_entry(&h->acked, struct page, lru);
		list_move_tail(&page->lru, &list);
		freed += 1UL << vb_hint_block_order(page);
		blocks++;
	}
	h->acked_pages -= freed;
	if (early)
		h->stats.blocks_returned_early += blocks;
	spin_unlock(&h->lock);

	vb_hint_block_list_free(&list);
	return freed;
}

static bool vb_hint_vq_dead(struct vb_device *vb)
{
	return test_bit(VB_HINT_F_STOPPING, &vb->hint.flags) ||
	       !vb->hint.vq || virtqueue_is_broken(vb->hint.vq);
}

/*
 * The worker gave up waiting for the device (DONE with chains still in
 * flight, or no room for a start id): run it again once the device uses a
 * buffer.  Caller holds vq_lock.
 */
static void vb_hint_retry_on_use(struct vb_device *vb)
{
	struct vb_hint *h = &vb->hint;

	if (vb_hint_vq_dead(vb))
		return;
	set_bit(VB_HINT_F_RETRY, &h->flags);
	/* used buffers already waiting: the callback would not fire for them */
	if (!virtqueue_enable_cb(h->vq) &&
	    test_and_clear_bit(VB_HINT_F_RETRY, &h->flags))
		queue_work(h->wq, &h->work);
}

/* Sleep until the device used a buffer, the config changed, or 10 ms */
static void vb_hint_wait(struct vb_device *vb)
{
	struct vb_hint *h = &vb->hint;

	/* the device must see everything queued so far */
	virtqueue_kick(h->vq);
	clear_bit(VB_HINT_F_VQ_USED, &h->flags);
	if (virtqueue_enable_cb(h->vq))
		wait_event_timeout(h->wait,
				   test_bit(VB_HINT_F_VQ_USED, &h->flags) ||
				   test_bit(VB_HINT_F_CMD_CHANGED, &h->flags) ||
				   test_bit(VB_HINT_F_STOPPING, &h->flags),
				   msecs_to_jiffies(VB_HINT_POLL_MS));
	virtqueue_disable_cb(h->vq);
}

/* Should the running round end now? */
static bool vb_hint_round_must_stop(struct vb_device *vb)
{
	if (vb_hint_vq_dead(vb))
		return true;
	return vb_hint_cmd_id_received(vb) != vb->hint.cmd_id_active;
}

/*
 * Wait for @need free descriptors.  In a round (@in_round) give up as soon
 * as the round must stop; otherwise (command buffers, faults) wait at most
 * VB_HINT_CMD_WAIT_MS.  Returns true when the room is there.
 */
static bool vb_hint_wait_room(struct vb_device *vb, unsigned int need,
			      bool in_round)
{
	struct vb_hint *h = &vb->hint;
	unsigned long deadline = jiffies + msecs_to_jiffies(VB_HINT_CMD_WAIT_MS);
	bool counted = false;

	if (need > h->ring_size)
		return false;
	for (;;) {
		if (vb_hint_vq_dead(vb))
			return false;
		if (h->vq->num_free >= need)
			return true;
		vb_hint_reap(vb);
		if (h->vq->num_free >= need)
			return true;
		if (in_round ? vb_hint_round_must_stop(vb) :
			       time_after(jiffies, deadline))
			return false;
		if (!counted) {
			spin_lock(&h->lock);
			h->stats.ring_full_waits++;
			spin_unlock(&h->lock);
			counted = true;
		}
		vb_hint_wait(vb);
	}
}

/*
 * Queue chain @c.  On failure the chain never reached the device and the
 * caller still owns it and its blocks.
 */
static int vb_hint_queue(struct vb_device *vb, struct vb_hint_chain *c,
			 struct scatterlist *sgs[], unsigned int out,
			 unsigned int in)
{
	struct vb_hint *h = &vb->hint;
	int err;

	spin_lock(&h->lock);
	list_add_tail(&c->node, &h->inflight);
	h->inflight_pages += c->nr_pages;
	spin_unlock(&h->lock);

	err = virtqueue_add_sgs(h->vq, sgs, out, in, c, GFP_KERNEL);
	if (err) {
		spin_lock(&h->lock);
		list_del(&c->node);
		h->inflight_pages -= c->nr_pages;
		spin_unlock(&h->lock);
	}
	return err;
}

/* Send a command id (start id or STOP) as a 4-byte outbuf */
static int vb_hint_send_cmd(struct vb_device *vb, u32 id)
{
	struct scatterlist sg, *sgs[1] = { &sg };
	struct vb_hint_chain *c;
	int err;

	if (!vb_hint_wait_room(vb, 1, false))
		return -ENOSPC;
	c = vb_hint_chain_alloc();
	if (!c)
		return -ENOMEM;
	c->cmd = cpu_to_virtio32(vb->vdev, id);
	sg_init_one(&sg, &c->cmd, sizeof(c->cmd));
	err = vb_hint_queue(vb, c, sgs, 1, 0);
	if (err) {
		kfree(c);
		return err;
	}
	virtqueue_kick(vb->hint.vq);
	return 0;
}

/*
 * Count one queued chain: @ranges descriptors carrying the free blocks
 * counted per order in @by_order, @bytes in all.
 */
static void vb_hint_count_chain(struct vb_hint *h, unsigned int ranges,
				u64 bytes, const u64 *by_order)
{
	u64 blocks = 0;
	unsigned int o;

	spin_lock(&h->lock);
	for (o = 0; o < VB_HINT_NR_ORDERS; o++) {
		h->stats.blocks_by_order[o] += by_order[o];
		blocks += by_order[o];
	}
	h->stats.round_blocks += blocks;
	h->stats.blocks_hinted += blocks;
	h->stats.ranges_hinted += ranges;
	h->stats.round_bytes += bytes;
	h->stats.bytes_hinted += bytes;
	spin_unlock(&h->lock);
}

/* A chain was queued: notify the device every chains_per_kick chains */
static void vb_hint_chain_queued(struct vb_hint *h, unsigned int *chains)
{
	if (++*chains >= h->cur.chains_per_kick) {
		virtqueue_kick(h->vq);
		*chains = 0;
	}
}

/*
 * Allocate one free block of the largest order <= *order that is still
 * available, never below min_order and never taking free memory below the
 * reserve.  *order only goes down during a round: once an order failed,
 * the larger orders are not retried.
 */
static struct page *vb_hint_alloc_block(struct vb_device *vb, int *order)
{
	const struct vb_hint_settings *s = &vb->hint.cur;
	unsigned long reserve = (unsigned long)s->reserve_kb >> (PAGE_SHIFT - 10);
	unsigned long nr_free;
	struct page *page;

	for (; *order >= (int)s->min_order; (*order)--) {
		nr_free = global_zone_page_state(NR_FREE_PAGES);
		if (nr_free < reserve + (1UL << *order))
			continue;
		page = alloc_pages(VB_HINT_GFP, *order);
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
static int vb_hint_send_chain(struct vb_device *vb, int *order)
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
		page = vb_hint_alloc_block(vb, order);
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

/*
 * Wait (bounded) for in-flight chains to come back so their blocks become
 * acked.  With @stop_on_cmd, give up as soon as the command id in config
 * is no longer @id.  Caller holds vq_lock.  Returns true when nothing is in
 * flight.
 */
static bool vb_hint_drain(struct vb_device *vb, unsigned int ms,
			  bool stop_on_cmd, u32 id)
{
	struct vb_hint *h = &vb->hint;
	unsigned long deadline = jiffies + msecs_to_jiffies(ms);

	for (;;) {
		vb_hint_reap(vb);
		if (list_empty(&h->inflight))
			return true;
		if (vb_hint_vq_dead(vb) || time_after(jiffies, deadline))
			return false;
		if (stop_on_cmd && vb_hint_cmd_id_received(vb) != id)
			return false;
		vb_hint_wait(vb);
	}
}

/* Best-effort page cache drop (drop_cache knob), see guest-driver.md */
static void vb_hint_drop_sb(struct super_block *sb, void *arg)
{
	unsigned long *dropped = arg;
	struct inode *inode, *last = NULL;

	spin_lock(&sb->s_inode_list_lock);
	list_for_each_entry(inode, &sb->s_inodes, i_sb_list) {
		spin_lock(&inode->i_lock);
		if ((inode->i_state & (I_FREEING | I_WILL_FREE | I_NEW)) ||
		    (!inode->i_mapping->nrpages && !need_resched())) {
			spin_unlock(&inode->i_lock);
			continue;
		}
		/* pin the inode so the list cursor stays valid unlocked */
		__iget(inode);
		spin_unlock(&inode->i_lock);
		spin_unlock(&sb->s_inode_list_lock);

		*dropped += invalidate_mapping_pages(inode->i_mapping, 0, -1);
		iput(last);
		last = inode;
		cond_resched();

		spin_lock(&sb->s_inode_list_lock);
	}
	spin_unlock(&sb->s_inode_list_lock);
	iput(last);
}

static void vb_hint_drop_cache(struct vb_device *vb)
{
	struct task_struct *init;
	struct path root = {};
	unsigned long dropped = 0;

	/* the filesystem type of init's root: all its superblocks */
	rcu_read_lock();
	init = pid_task(find_vpid(1), PIDTYPE_PID);
	if (init)
		get_task_struct(init);
	rcu_read_unlock();
	if (!init)
		return;

	task_lock(init);
	if (init->fs)
		get_fs_root(init->fs, &root);
	task_unlock(init);
	put_task_struct(init);
	if (!root.mnt)
		return;

	iterate_supers_type(root.mnt->mnt_sb->s_type, vb_hint_drop_sb,
			    &dropped);
	path_put(&root);
	dev_dbg(&vb->vdev->dev, "drop_cache: %lu pages invalidated\n", dropped);
}

/* Scan mode, see the design comment at the top */

/*
 * May a round use @mode on device @vb (NULL: the module default)?  Scan
 * loses a free page's content, so not when the guest keeps one (page
 * poisoning, init_on_free), nor when the device was promised held pages.
 */
bool vb_hint_mode_allowed(struct vb_device *vb, unsigned int mode)
{
	if (mode >= VB_HINT_NR_MODES)
		return false;
	if (mode != VB_HINT_MODE_SCAN)
		return true;
	if (page_poisoning_enabled_static() || want_init_on_free())
		return false;
	return !vb || !vb_has(vb, VIRTIO_BALLOON_F_HINT_HOLD);
}

/* Move the open range to the closed ranges (there is room for it) */
static void vb_hint_scan_close(struct vb_hint_scan *sc)
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
static bool vb_hint_scan_extends(const struct vb_hint_scan *sc,
				 unsigned long pfn, unsigned long nr)
{
	return sc->nr && sc->start + sc->nr == pfn &&
	       sc->nr + nr <= VB_HINT_SCAN_MAX_RANGE;
}

/*
 * Scan @zone from *@pfn (up to @end) for at most VB_HINT_SCAN_PFNS_PER_LOCK
 * steps under zone->lock.  Stops early when the closed ranges are full;
 * the caller then queues them.  The buddy state (PageBuddy, its order) only
 * changes under zone->lock, so every block recorded was free at that time.
 */
static void vb_hint_scan_step(struct vb_device *vb, struct zone *zone,
			      unsigned long *pfnp, unsigned long end)
{
	struct vb_hint_scan *sc = &vb->hint.scan;
	unsigned int min_order = vb->hint.cur.min_order;
	unsigned long budget = VB_HINT_SCAN_PFNS_PER_LOCK;
	unsigned long pfn = *pfnp, online_end = 0, flags, nr;
	unsigned int order;
	struct page *page;

	/*
	 * online_end: sections below it are known to be online.  That holds
	 * only while zone->lock is held (memory can go offline between two
	 * steps), so it is learnt again by every step.
	 */
	spin_lock_irqsave(&zone->lock, flags);
	while (pfn < end && budget--) {
		/* memory sections come and go as a whole */
		if (pfn >= online_end) {
			if (!pfn_to_online_page(pfn)) {
				pfn = ALIGN(pfn + 1, PAGES_PER_SECTION);
				continue;
			}
			online_end = ALIGN(pfn + 1, PAGES_PER_SECTION);
		}
		page = pfn_to_page(pfn);
		if (!PageBuddy(page) || page_zone(page) != zone) {
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
			if (!vb_hint_scan_extends(sc, pfn, nr)) {
				if (sc->n == sc->max)
					break;	/* queue first, then this one */
				vb_hint_scan_close(sc);
				sc->start = pfn;
			}
			sc->nr += nr;
			sc->open_by_order[order]++;
		}
		pfn += nr;
	}
	spin_unlock_irqrestore(&zone->lock, flags);
	*pfnp = pfn;
}

/*
 * Queue the closed ranges as one chain.  Returns 0, or -EINTR when the
 * round must stop (the ranges are dropped: nothing is held).
 */
static int vb_hint_scan_queue(struct vb_device *vb, unsigned int *chains)
{
	struct vb_hint *h = &vb->hint;
	struct vb_hint_scan *sc = &h->scan;
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

/* One scan round: every populated zone of every online node, in PFN order */
static int vb_hint_scan_round(struct vb_device *vb)
{
	struct vb_hint *h = &vb->hint;
	struct vb_hint_scan *sc = &h->scan;
	unsigned int chains = 0;
	unsigned long pfn, end;
	struct zone *zone;
	int nid, zid, err;

	memset(sc, 0, sizeof(*sc));
	sc->max = min(h->cur.blocks_per_chain, h->ring_size - 1);

	for_each_online_node(nid) {
		for (zid = 0; zid < MAX_NR_ZONES; zid++) {
			zone = &NODE_DATA(nid)->node_zones[zid];
			if (!populated_zone(zone))
				continue;
			pfn = zone->zone_start_pfn;
			end = zone_end_pfn(zone);
			while (pfn < end) {
				if (vb_hint_round_must_stop(vb))
					return -EINTR;
				vb_hint_scan_step(vb, zone, &pfn, end);
				if (sc->n == sc->max) {
					err = vb_hint_scan_queue(vb, &chains);
					if (err)
						return err;
				}
				cond_resched();
			}
		}
	}
	/* the open range may need the room of a full set of closed ones */
	if (sc->nr && sc->n == sc->max) {
		err = vb_hint_scan_queue(vb, &chains);
		if (err)
			return err;
	}
	vb_hint_scan_close(sc);
	return vb_hint_scan_queue(vb, &chains);
}

/* One alloc round: take and hold free blocks until none is left */
static int vb_hint_alloc_round(struct vb_device *vb)
{
	struct vb_hint *h = &vb->hint;
	unsigned int chains = 0;
	int order = VB_HINT_MAX_ORDER;
	int ret = 0;

	while (!vb_hint_round_must_stop(vb)) {
		ret = vb_hint_send_chain(vb, &order);
		if (ret <= 0)
			break;
		vb_hint_chain_queued(h, &chains);
		cond_resched();
	}
	return ret < 0 ? ret : 0;
}

static void vb_hint_round(struct vb_device *vb, u32 cmd_id)
{
	struct vb_hint *h = &vb->hint;
	u64 start = ktime_get_ns();
	int ret;

	if (h->cur.drop_cache)
		vb_hint_drop_cache(vb);

	mutex_lock(&h->vq_lock);
	if (vb_hint_vq_dead(vb))
		goto out_unlock;

	vb_hint_reap(vb);

	/*
	 * The host issues a command id right after a dirty bitmap sync.  A
	 * host that does not re-arm its write tracking at the sync (stock
	 * QEMU 7.2 under TCG, fixed by our series' patch 1) does not log a
	 * store made through a TLB entry that was filled before the sync, so
	 * a page we report, then reuse, could lose that store.  Flushing every
	 * CPU's TLB before we look for free memory makes every store after
	 * this point go through a new entry, which such a host logs.  One IPI
	 * per round; with a correct host it changes nothing.
	 */
	vb_compat_flush_tlb_all();

	/* the id becomes active (answered) only once it is queued */
	ret = vb_hint_send_cmd(vb, cmd_id);
	if (ret) {
		dev_warn_ratelimited(&vb->vdev->dev,
				     "hint: cannot send start id: %d\n", ret);
		vb_hint_retry_on_use(vb);
		goto out_unlock;
	}
	if (h->cmd_id_active >= VIRTIO_BALLOON_FREE_PAGE_HINT_CMD_ID_MIN)
		h->cmd_id_previous = h->cmd_id_active;
	h->cmd_id_active = cmd_id;

	spin_lock(&h->lock);
	h->stats.rounds++;
	h->stats.round_blocks = 0;
	h->stats.round_bytes = 0;
	spin_unlock(&h->lock);

	if (h->cur.mode == VB_HINT_MODE_SCAN)
		ret = vb_hint_scan_round(vb);
	else
		ret = vb_hint_alloc_round(vb);
	if (ret < 0 && ret != -EINTR)
		dev_warn_ratelimited(&vb->vdev->dev, "hint: round error %d\n",
				     ret);
	virtqueue_kick(h->vq);

	vb_fault_inject_round(vb);

	ret = vb_hint_send_cmd(vb, VIRTIO_BALLOON_CMD_ID_STOP);
	if (ret)
		dev_warn_ratelimited(&vb->vdev->dev,
				     "hint: cannot send stop id: %d\n", ret);

	vb_hint_drain(vb, VB_HINT_ROUND_DRAIN_MS, true, cmd_id);

	spin_lock(&h->lock);
	h->stats.last_round_ns = ktime_get_ns() - start;
	spin_unlock(&h->lock);
out_unlock:
	mutex_unlock(&h->vq_lock);
}

/*
 * Hinting disabled by its knob: answer the command at once with its id
 * followed by STOP and no block, so that a host waiting for the round (our
 * QEMU waits before sending RAM) does not wait for nothing.
 */
static void vb_hint_decline(struct vb_device *vb, u32 cmd_id)
{
	struct vb_hint *h = &vb->hint;

	mutex_lock(&h->vq_lock);
	if (!vb_hint_vq_dead(vb)) {
		vb_hint_reap(vb);
		if (!vb_hint_send_cmd(vb, cmd_id)) {
			h->cmd_id_active = cmd_id;
			vb_hint_send_cmd(vb, VIRTIO_BALLOON_CMD_ID_STOP);
		} else {
			vb_hint_retry_on_use(vb);
		}
	}
	mutex_unlock(&h->vq_lock);
}

/*
 * DONE: every block goes back to mm once the device returned it.  Chains
 * the device still keeps after the drain are freed when it returns them:
 * the worker runs again on the next used buffer.
 */
static void vb_hint_done(struct vb_device *vb)
{
	struct vb_hint *h = &vb->hint;
	bool drained;

	mutex_lock(&h->vq_lock);
	drained = vb_hint_drain(vb, VB_HINT_DONE_DRAIN_MS, true,
				VIRTIO_BALLOON_CMD_ID_DONE);
	if (!drained && vb_hint_cmd_id_received(vb) ==
			VIRTIO_BALLOON_CMD_ID_DONE) {
		dev_warn_ratelimited(&vb->vdev->dev,
				     "hint: %lu pages still in flight after DONE\n",
				     READ_ONCE(h->inflight_pages));
		vb_hint_retry_on_use(vb);
	}
	mutex_unlock(&h->vq_lock);

	vb_hint_free_acked(vb, ULONG_MAX, false);
}

static void vb_hint_work_fn(struct work_struct *work)
{
	struct vb_device *vb = container_of(work, struct vb_device, hint.work);
	struct vb_hint *h = &vb->hint;
	u32 id;

	if (test_bit(VB_HINT_F_STOPPING, &h->flags))
		return;

	id = vb_hint_cmd_id_received(vb);
	if (id == VIRTIO_BALLOON_CMD_ID_DONE) {
		vb_hint_done(vb);
		return;
	}
	if (id == VIRTIO_BALLOON_CMD_ID_STOP || id == h->cmd_id_active)
		return;

	/* knobs written from now on apply to the next round */
	vb_sysfs_snapshot(vb, &h->cur);
	if (!h->cur.enabled) {
		vb_hint_decline(vb, id);
		return;
	}
	vb_hint_round(vb, id);
}

/* Shrinker: only acked blocks are returned early */

static unsigned long vb_hint_shrink_count(struct shrinker *shrinker,
					  struct shrink_control *sc)
{
	struct vb_device *vb = vb_compat_shrinker_priv(shrinker);
	struct vb_hint *h = &vb->hint;

	if (mutex_trylock(&h->vq_lock)) {
		vb_hint_reap(vb);
		mutex_unlock(&h->vq_lock);
	}
	return READ_ONCE(h->acked_pages);
}

static unsigned long vb_hint_shrink_scan(struct shrinker *shrinker,
					 struct shrink_control *sc)
{
	struct vb_device *vb = vb_compat_shrinker_priv(shrinker);
	unsigned long freed;

	freed = vb_hint_free_acked(vb, sc->nr_to_scan, true);
	return freed ? freed : SHRINK_STOP;
}

/* Interface to vb_core.c */

void vb_hint_vq_done(struct virtqueue *vq)
{
	struct vb_device *vb = vq->vdev->priv;
	struct vb_hint *h = &vb->hint;

	set_bit(VB_HINT_F_VQ_USED, &h->flags);
	wake_up(&h->wait);
	if (test_and_clear_bit(VB_HINT_F_RETRY, &h->flags) &&
	    !test_bit(VB_HINT_F_STOPPING, &h->flags))
		queue_work(h->wq, &h->work);
}

/* Called from the config interrupt, under stop_update_lock */
void vb_hint_config_changed(struct vb_device *vb)
{
	struct vb_hint *h = &vb->hint;

	if (!h->wq)
		return;
	set_bit(VB_HINT_F_CMD_CHANGED, &h->flags);
	wake_up(&h->wait);
	queue_work(h->wq, &h->work);
}

void vb_hint_attach_vq(struct vb_device *vb, struct virtqueue *vq)
{
	struct vb_hint *h = &vb->hint;

	mutex_lock(&h->vq_lock);
	h->vq = vq;
	h->ring_size = vq ? virtqueue_get_vring_size(vq) : 0;
	if (vq)
		virtqueue_disable_cb(vq);
	mutex_unlock(&h->vq_lock);
}

int vb_hint_init(struct vb_device *vb)
{
	struct vb_hint *h = &vb->hint;
	int err;

	mutex_init(&h->vq_lock);
	spin_lock_init(&h->lock);
	INIT_LIST_HEAD(&h->inflight);
	INIT_LIST_HEAD(&h->acked);
	init_waitqueue_head(&h->wait);
	INIT_WORK(&h->work, vb_hint_work_fn);
	h->cmd_id_received = VIRTIO_BALLOON_CMD_ID_STOP;
	h->cmd_id_active = VIRTIO_BALLOON_CMD_ID_STOP;
	vb_core_default_settings(&h->cur);

	if (!vb_has(vb, VIRTIO_BALLOON_F_FREE_PAGE_HINT))
		return 0;

	h->wq = alloc_workqueue("vb-hint-%s", WQ_FREEZABLE | WQ_CPU_INTENSIVE,
				0, dev_name(&vb->vdev->dev));
	if (!h->wq)
		return -ENOMEM;

	err = vb_compat_shrinker_register(&h->shrinker, vb_hint_shrink_count,
					  vb_hint_shrink_scan, vb,
					  "virtio-balloon-hint");
	if (err) {
		destroy_workqueue(h->wq);
		h->wq = NULL;
		return err;
	}
	h->shrinker_registered = true;
	return 0;
}

/* Stop the worker: any running round ends promptly (remove/freeze) */
void vb_hint_quiesce(struct vb_device *vb)
{
	struct vb_hint *h = &vb->hint;

	set_bit(VB_HINT_F_STOPPING, &h->flags);
	wake_up(&h->wait);
	if (h->wq)
		cancel_work_sync(&h->work);
}

/*
 * The device was reset: nothing is in flight any more.  Detach the vq
 * first, under the lock the shrinker's reap takes: the vq may still hold
 * used entries that point at the chains freed here.  Then free every block.
 */
void vb_hint_release_after_reset(struct vb_device *vb)
{
	struct vb_hint *h = &vb->hint;
	struct vb_hint_chain *c, *next;

	mutex_lock(&h->vq_lock);
	h->vq = NULL;
	h->ring_size = 0;
	spin_lock(&h->lock);
	list_for_each_entry_safe(c, next, &h->inflight, node) {
		list_del(&c->node);
		list_splice_tail_init(&c->blocks, &h->acked);
		h->acked_pages += c->nr_pages;
		kfree(c);
	}
	h->inflight_pages = 0;
	spin_unlock(&h->lock);
	mutex_unlock(&h->vq_lock);

	vb_hint_free_acked(vb, ULONG_MAX, false);
}

/* Restore after freeze: a fresh device, no command seen yet */
void vb_hint_resume(struct vb_device *vb)
{
	struct vb_hint *h = &vb->hint;

	h->cmd_id_received = VIRTIO_BALLOON_CMD_ID_STOP;
	h->cmd_id_active = VIRTIO_BALLOON_CMD_ID_STOP;
	clear_bit(VB_HINT_F_CMD_CHANGED, &h->flags);
	clear_bit(VB_HINT_F_STOPPING, &h->flags);
}

void vb_hint_exit(struct vb_device *vb)
{
	struct vb_hint *h = &vb->hint;

	if (h->shrinker_registered) {
		vb_compat_shrinker_unregister(&h->shrinker);
		h->shrinker_registered = false;
	}
	if (h->wq) {
		set_bit(VB_HINT_F_STOPPING, &h->flags);
		cancel_work_sync(&h->work);
		destroy_workqueue(h->wq);
		h->wq = NULL;
	}
	/* nothing may be left: the device was reset before */
	WARN_ON(!list_empty(&h->inflight) || !list_empty(&h->acked));
}

void vb_hint_stats_snapshot(struct vb_device *vb, struct vb_hint_stats *out)
{
	spin_lock(&vb->hint.lock);
	*out = vb->hint.stats;
	spin_unlock(&vb->hint.lock);
}

/*
 * Fault injection for host tests (module parameter fault_inject=1).
 *
 * /sys/kernel/debug/virtio_balloon/<dev>/inject_bad_hints accepts one of
 * the names below; the next round sends that malformed hint in addition
 * to the normal ones.  The device is never handed a page the guest uses:
 * every fault that points at guest RAM points into a block the hint engine
 * allocated and holds like any other hinted block.  out_of_ram points at
 * no guest memory at all.
 */

static const char * const vb_fault_names[VB_FAULT_NR] = {
	[VB_FAULT_ZERO_LEN] = "zero_len",
	[VB_FAULT_OUT_OF_RAM] = "out_of_ram",
	[VB_FAULT_STALE_ID] = "stale_id",
	[VB_FAULT_MISALIGNED] = "misaligned",
	[VB_FAULT_OVERSIZED_CHAIN] = "oversized_chain",
	[VB_FAULT_SHORT_CMD] = "short_cmd",
};

static struct dentry *vb_fault_root;

static struct page *vb_fault_alloc_block(unsigned int order)
{
	struct page *page;

	page = alloc_pages(GFP_KERNEL | __GFP_NORETRY | __GFP_NOWARN, order);
	if (page)
		set_page_private(page, order);
	return page;
}

/* Queue a fault chain; on failure free what the device never saw */
static int vb_fault_queue(struct vb_device *vb, struct vb_hint_chain *c,
			  struct scatterlist *sgs[], unsigned int out,
			  unsigned int in, unsigned int descs)
{
	int err = -ENOSPC;

	/* keep the slot of the STOP id */
	if (vb_hint_wait_room(vb, descs + 1, false))
		err = vb_hint_queue(vb, c, sgs, out, in);
	if (err) {
		vb_hint_block_list_free(&c->blocks);
		kfree(c);
	}
	return err;
}

/* Highest guest physical address + 1 covered by a node */
static unsigned long vb_fault_end_pfn(void)
{
	unsigned long end = 0;
	int nid;

	for_each_online_node(nid)
		end = max(end, pgdat_end_pfn(NODE_DATA(nid)));
	return end;
}

static int vb_fault_one(struct vb_device *vb, enum vb_fault kind)
{
	struct vb_hint *h = &vb->hint;
	struct scatterlist sg[2], *sgs[2] = { &sg[0], &sg[1] };
	struct scatterlist *big;
	struct vb_hint_chain *c;
	unsigned long end_pfn;
	unsigned int i, n, order;
	struct page *page;
	u64 target, base;
	u32 stale;
	int err;

	c = vb_hint_chain_alloc();
	if (!c)
		return -ENOMEM;

	switch (kind) {
	case VB_FAULT_ZERO_LEN:
		/* a held page, but a descriptor of length 0 */
		page = vb_fault_alloc_block(0);
		if (!page)
			break;
		vb_hint_chain_add_block(c, page);
		sg_init_table(sg, 1);
		sg_set_page(&sg[0], page, 0, 0);
		return vb_fault_queue(vb, c, sgs, 0, 1, 1);
	case VB_FAULT_MISALIGNED:
		/* inside a held 2-page block: start and length not aligned */
		page = vb_fault_alloc_block(1);
		if (!page)
			break;
		vb_hint_chain_add_block(c, page);
		sg_init_table(sg, 1);
		sg_set_page(&sg[0], page, PAGE_SIZE + 0x100, 0x200);
		return vb_fault_queue(vb, c, sgs, 0, 1, 1);
	case VB_FAULT_OUT_OF_RAM:
		/*
		 * Without the DMA API the ring carries sg_phys() =
		 * page_to_phys(page) + offset.  Take the last pfn of RAM
		 * (its memmap exists; its memory is not touched) and an
		 * offset that lands on the next 1 GiB boundary at or above
		 * the end of RAM: no guest RAM is there.
		 */
		end_pfn = vb_fault_end_pfn();
		if (!end_pfn || !pfn_valid(end_pfn - 1))
			break;
		base = PFN_PHYS(end_pfn - 1);
		target = ALIGN(PFN_PHYS(end_pfn), SZ_1G);
		if (target - base > UINT_MAX - PAGE_SIZE)
			break;
		sg_init_table(sg, 1);
		sg_set_page(&sg[0], pfn_to_page(end_pfn - 1), PAGE_SIZE,
			    target - base);
		return vb_fault_queue(vb, c, sgs, 0, 1, 1);
	case VB_FAULT_STALE_ID:
		/* one chain: outbuf with an old id, inbuf with a held page */
		stale = h->cmd_id_previous;
		if (!stale)
			stale = h->cmd_id_active - 1;
		page = vb_fault_alloc_block(0);
		if (!page)
			break;
		vb_hint_chain_add_block(c, page);
		c->cmd = cpu_to_virtio32(vb->vdev, stale);
		sg_init_one(&sg[0], &c->cmd, sizeof(c->cmd));
		sg_init_table(&sg[1], 1);
		sg_set_page(&sg[1], page, PAGE_SIZE, 0);
		return vb_fault_queue(vb, c, sgs, 1, 1, 2);
	case VB_FAULT_OVERSIZED_CHAIN:
		/* a whole ring (minus the STOP slot) of 1-page descriptors */
		n = min(h->ring_size - 1, 1U << VB_HINT_MAX_ORDER);
		order = order_base_2(n);
		big = kvmalloc_array(n, sizeof(*big), GFP_KERNEL);
		if (!big)
			break;
		page = vb_fault_alloc_block(order);
		if (!page) {
			kvfree(big);
			break;
		}
		vb_hint_chain_add_block(c, page);
		sg_init_table(big, n);
		for (i = 0; i < n; i++)
			sg_set_page(&big[i], nth_page(page, i), PAGE_SIZE, 0);
		sgs[0] = big;
		/* wait for an empty ring rather than fail */
		vb_hint_drain(vb, VB_HINT_CMD_WAIT_MS, false, 0);
		err = vb_fault_queue(vb, c, sgs, 0, 1, n);
		kvfree(big);
		return err;
	case VB_FAULT_SHORT_CMD:
		/* a command id outbuf of 2 bytes instead of 4, nothing held */
		c->cmd = cpu_to_virtio32(vb->vdev, h->cmd_id_active);
		sg_init_one(&sg[0], &c->cmd, 2);
		return vb_fault_queue(vb, c, sgs, 1, 0, 1);
	default:
		break;
	}
	kfree(c);
	return -ENOMEM;
}

/* Called by the round, vq_lock held, before the STOP id */
static void vb_fault_inject_round(struct vb_device *vb)
{
	struct vb_fault_state *f = &vb->fault;
	int kind, err;

	if (!f->dir)
		return;
	/*
	 * stale_id goes last, just before STOP: a device treats a foreign
	 * command id as the end of the round, so anything after it would be
	 * counted as stale instead of by its own reason.
	 */
	for (int i = 0; i < VB_FAULT_NR; i++) {
		kind = i < VB_FAULT_STALE_ID ? i :
		       i == VB_FAULT_NR - 1 ? VB_FAULT_STALE_ID : i + 1;
		if (!test_and_clear_bit(kind, &f->pending))
			continue;
		err = vb_fault_one(vb, kind);
		if (err) {
			dev_warn(&vb->vdev->dev, "fault %s not injected: %d\n",
				 vb_fault_names[kind], err);
			continue;
		}
		atomic64_inc(&f->injected[kind]);
		dev_info(&vb->vdev->dev, "injected bad hint: %s\n",
			 vb_fault_names[kind]);
	}
	virtqueue_kick(vb->hint.vq);
}

static int vb_fault_show(struct seq_file *m, void *unused)
{
	struct vb_device *vb = m->private;
	int kind;

	for (kind = 0; kind < VB_FAULT_NR; kind++)
		seq_printf(m, "%s injected=%lld pending=%d\n",
			   vb_fault_names[kind],
			   (long long)atomic64_read(&vb->fault.injected[kind]),
			   test_bit(kind, &vb->fault.pending));
	return 0;
}

static int vb_fault_open(struct inode *inode, struct file *file)
{
	return single_open(file, vb_fault_show, inode->i_private);
}

static ssize_t vb_fault_write(struct file *file, const char __user *ubuf,
			      size_t len, loff_t *ppos)
{
	struct seq_file *m = file->private_data;
	struct vb_device *vb = m->private;
	char buf[32];
	int kind;

	if (len == 0 || len >= sizeof(buf))
		return -EINVAL;
	if (copy_from_user(buf, ubuf, len))
		return -EFAULT;
	buf[len] = '\0';
	if (buf[len - 1] == '\n')
		buf[len - 1] = '\0';

	kind = match_string(vb_fault_names, VB_FAULT_NR, buf);
	if (kind < 0)
		return -EINVAL;
	set_bit(kind, &vb->fault.pending);
	return len;
}

static const struct file_operations vb_fault_fops = {
	.owner = THIS_MODULE,
	.open = vb_fault_open,
	.read = seq_read,
	.write = vb_fault_write,
	.llseek = seq_lseek,
	.release = single_release,
};

int vb_fault_init(struct vb_device *vb)
{
	if (!vb_fault_root || !vb->hint.wq)
		return 0;
	vb->fault.dir = debugfs_create_dir(dev_name(&vb->vdev->dev),
					   vb_fault_root);
	debugfs_create_file("inject_bad_hints", 0600, vb->fault.dir, vb,
			    &vb_fault_fops);
	return 0;
}

void vb_fault_exit(struct vb_device *vb)
{
	debugfs_remove_recursive(vb->fault.dir);
	vb->fault.dir = NULL;
}

void vb_fault_module_init(void)
{
	if (vb_param_fault_inject)
		vb_fault_root = debugfs_create_dir(KBUILD_MODNAME, NULL);
}

void vb_fault_module_exit(void)
{
	debugfs_remove_recursive(vb_fault_root);
	vb_fault_root = NULL;
}
