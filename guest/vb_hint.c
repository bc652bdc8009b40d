// SPDX-License-Identifier: GPL-2.0
/*
 * vb_hint.c - free page hinting (VIRTIO_BALLOON_F_FREE_PAGE_HINT): the round
 * engine.  It speaks the protocol, owns the free page vq and the blocks
 * that travel on it, and gives acked blocks back through a shrinker.  The
 * searches for free memory live in vb_scan.c and vb_alloc.c.
 *
 * Protocol: the host writes a command id (>= 0x80000000) to config space
 * and raises a config interrupt.  A round then is:
 *
 *   outbuf(cmd id)  inbuf(range, range, ...)  ...  outbuf(STOP)
 *
 * The round ends when the search found all free memory, the host changes
 * the id (STOP or a new id), system sleep is being prepared, or the device
 * returns no buffer for VB_HINT_ROUND_WAIT_MS while we wait for ring room.
 * The STOP that tells the device is retried until it is queued, for as
 * long as the round's id is the device's (vb_hint_send_stop()).  DONE ends
 * hinting for the migration: every held block goes back.
 *
 * Which search a round uses is the core's decision (vb_core_hint_mode(),
 * knob "mode", module parameter hint_mode), made again at every round
 * from a snapshot of the settings:
 *
 *  - scan reports free blocks without taking them (vb_scan.c).  Only when
 *    the device negotiated VIRTIO_BALLOON_F_HINT_KEEP_WRITES, promising to
 *    keep every write made after it issued the command id, when buffers
 *    are not bounced through the DMA API, and when free pages have no
 *    content the guest relies on (page poisoning, init_on_free).
 *  - alloc takes free blocks and holds them (vb_alloc.c): safe on every
 *    device, the default everywhere else.
 *
 * Holding blocks: a block handed to the device is "in flight"
 * (hint.inflight) until virtqueue_get_buf() returns its chain, then
 * "acked" (hint.acked).  Only acked blocks go back to mm (shrinker, DONE).
 * On remove/freeze the device is reset first; after a reset it uses no
 * buffer, so every block may be freed.
 *
 * Both searches put up to blocks_per_chain ranges in a descriptor chain
 * and notify every chains_per_kick chains; a full ring is waited on (vq
 * callback, 10 ms poll), never spun on, and never for longer than
 * VB_HINT_ROUND_WAIT_MS without progress.
 *
 * Sleep: a PM notifier (vb_core.c) pauses hinting before the freezer runs,
 * which ends a running round promptly: while paused nothing waits for the
 * device (the drains after STOP and DONE, waits for ring room give up at
 * once, a STOP that cannot be queued is owed), since the notifier waits
 * for the worker and a wait would not sleep; the worker is on a freezable
 * workqueue, so no round starts until the system has resumed.
 *
 * Locking: hint.vq_lock (mutex) serializes the free page vq between the
 * worker and the shrinker (which only trylocks it).  hint.lock (spinlock)
 * protects the block lists, page counts and stats; it is never held while
 * allocating memory.
 */

#include <linux/mm.h>
#include <linux/gfp.h>
#include <linux/slab.h>
#include <linux/vmstat.h>
#include <linux/ktime.h>
#include <linux/sched.h>
#include <linux/sched/cputime.h>
#include <linux/string.h>
#include <linux/delay.h>

#include "vb.h"

/* poll period when waiting for the device to return buffers */
#define VB_HINT_POLL_MS		10
/* how long a round waits for its chains to come back after STOP */
#define VB_HINT_ROUND_DRAIN_MS	1000
/* how long DONE waits for in-flight chains before waiting for the vq */
#define VB_HINT_DONE_DRAIN_MS	2000
/* how long a round waits for ring room with no buffer coming back */
#define VB_HINT_ROUND_WAIT_MS	2000
/* how long a round retries its STOP before leaving it to the next buffer */
#define VB_HINT_STOP_RETRY_MS	1000

/* Blocks: the buddy order lives in page_private() of the first page */

unsigned int vb_hint_block_order(struct page *page)
{
	return page_private(page);
}

static void vb_hint_block_free(struct page *page)
{
	unsigned int order = vb_hint_block_order(page);

	set_page_private(page, 0);
	__free_pages(page, order);
}

void vb_hint_block_list_free(struct list_head *list)
{
	struct page *page, *next;

	list_for_each_entry_safe(page, next, list, lru) {
		list_del(&page->lru);
		vb_hint_block_free(page);
	}
}

struct vb_hint_chain *vb_hint_chain_alloc(void)
{
	struct vb_hint_chain *c = kzalloc(sizeof(*c), GFP_KERNEL);

	if (c)
		INIT_LIST_HEAD(&c->blocks);
	return c;
}

void vb_hint_chain_add_block(struct vb_hint_chain *c, struct page *page)
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
				   test_bit(VB_HINT_F_STOPPING, &h->flags) ||
				   test_bit(VB_HINT_F_PM_PAUSE, &h->flags),
				   msecs_to_jiffies(VB_HINT_POLL_MS));
	virtqueue_disable_cb(h->vq);
}

/* System sleep is being prepared: nothing may wait for the device */
static bool vb_hint_paused(struct vb_device *vb)
{
	return test_bit(VB_HINT_F_PM_PAUSE, &vb->hint.flags);
}

/* Should the running round end now? */
bool vb_hint_round_must_stop(struct vb_device *vb)
{
	if (vb_hint_vq_dead(vb) || vb_hint_paused(vb))
		return true;
	return vb_hint_cmd_id_received(vb) != vb->hint.cmd_id_active;
}

/*
 * Room to queue a chain: @need free descriptors, and at most @max_inflight
 * pages in flight.  Caller holds vq_lock, so only it changes inflight_pages.
 */
static bool vb_hint_has_room(struct vb_hint *h, unsigned int need,
			     unsigned long max_inflight)
{
	return h->vq->num_free >= need && h->inflight_pages <= max_inflight;
}

/*
 * Wait for @need free descriptors and for the pages in flight to be at most
 * @max_inflight (ULONG_MAX: no bound; alloc rounds pass their cap).  In a
 * round (@in_round) give up as soon as the round must stop, or when no
 * buffer came back for VB_HINT_ROUND_WAIT_MS (the round is then counted as
 * timed out); otherwise (command buffers, faults) wait at most
 * VB_HINT_CMD_WAIT_MS.  Returns true when the room is there.
 */
bool vb_hint_wait_room(struct vb_device *vb, unsigned int need,
		       unsigned long max_inflight, bool in_round)
{
	struct vb_hint *h = &vb->hint;
	unsigned long deadline;
	bool counted = false;

	deadline = jiffies + msecs_to_jiffies(in_round ? VB_HINT_ROUND_WAIT_MS :
					      VB_HINT_CMD_WAIT_MS);
	if (need > h->ring_size)
		return false;
	for (;;) {
		if (vb_hint_vq_dead(vb))
			return false;
		if (vb_hint_has_room(h, need, max_inflight))
			return true;
		/* no waiting while sleep is prepared (see vb_hint_drain()) */
		if (vb_hint_paused(vb))
			return false;
		if (vb_hint_reap(vb))
			deadline = jiffies + msecs_to_jiffies(in_round ?
				   VB_HINT_ROUND_WAIT_MS : VB_HINT_CMD_WAIT_MS);
		if (vb_hint_has_room(h, need, max_inflight))
			return true;
		if (in_round && vb_hint_round_must_stop(vb))
			return false;
		if (time_after(jiffies, deadline)) {
			if (in_round) {
				spin_lock(&h->lock);
				h->stats.rounds_timed_out++;
				spin_unlock(&h->lock);
			}
			return false;
		}
		if (!counted) {
			spin_lock(&h->lock);
			if (h->vq->num_free < need)
				h->stats.ring_full_waits++;
			else
				h->stats.inflight_waits++;
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
int vb_hint_queue(struct vb_device *vb, struct vb_hint_chain *c,
		  struct scatterlist *sgs[], unsigned int out, unsigned int in)
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

	if (!vb_hint_wait_room(vb, 1, ULONG_MAX, false))
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
 * End round @cmd_id for the device: queue STOP.  Its slot is reserved, so
 * this fails only while buffers the device keeps fill the ring or an
 * allocation fails; a host waiting for the round would then wait for its
 * own timeout.  Try again as buffers come back, for as long as @cmd_id is
 * the device's id (a new id or STOP from the host ends the round anyway);
 * after VB_HINT_STOP_RETRY_MS leave the STOP owed, and the worker sends it
 * when the device next uses a buffer.  Caller holds vq_lock.
 */
static void vb_hint_send_stop(struct vb_device *vb, u32 cmd_id)
{
	unsigned long deadline = jiffies +
				 msecs_to_jiffies(VB_HINT_STOP_RETRY_MS);
	struct vb_hint *h = &vb->hint;
	bool counted = false;
	int err;

	clear_bit(VB_HINT_F_STOP_OWED, &h->flags);
	for (;;) {
		err = vb_fault_fail_stop(vb) ? -ENOMEM :
		      vb_hint_send_cmd(vb, VIRTIO_BALLOON_CMD_ID_STOP);
		if (!err)
			return;
		if (vb_hint_vq_dead(vb) || vb_hint_cmd_id_received(vb) != cmd_id)
			return;
		if (!counted) {
			spin_lock(&h->lock);
			h->stats.stop_retries++;
			spin_unlock(&h->lock);
			counted = true;
		}
		if (time_after(jiffies, deadline))
			break;
		vb_hint_wait(vb);
		vb_hint_reap(vb);
	}
	dev_warn_ratelimited(&vb->vdev->dev,
			     "hint: cannot send stop id: %d, sending it later\n",
			     err);
	set_bit(VB_HINT_F_STOP_OWED, &h->flags);
	vb_hint_retry_on_use(vb);
}

/*
 * Count one queued chain: @ranges descriptors carrying the free blocks
 * counted per order in @by_order, @bytes in all.
 */
void vb_hint_count_chain(struct vb_hint *h, unsigned int ranges, u64 bytes,
			 const u64 *by_order)
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
void vb_hint_chain_queued(struct vb_hint *h, unsigned int *chains)
{
	if (++*chains >= h->cur.chains_per_kick) {
		virtqueue_kick(h->vq);
		*chains = 0;
	}
}

/*
 * Wait (bounded) for in-flight chains to come back so their blocks become
 * acked.  With @stop_on_cmd, give up as soon as the command id in config
 * is no longer @id.  Gives up at once while system sleep is prepared
 * (vb_hint_wait() would not sleep: the PM notifier is waiting for this
 * work); freeze resets the device, which gives every block back.  Caller
 * holds vq_lock.  Returns true when nothing is in flight.
 */
bool vb_hint_drain(struct vb_device *vb, unsigned int ms, bool stop_on_cmd,
		   u32 id)
{
	struct vb_hint *h = &vb->hint;
	unsigned long deadline = jiffies + msecs_to_jiffies(ms);

	for (;;) {
		vb_hint_reap(vb);
		if (list_empty(&h->inflight))
			return true;
		if (vb_hint_vq_dead(vb) || vb_hint_paused(vb) ||
		    time_after(jiffies, deadline))
			return false;
		if (stop_on_cmd && vb_hint_cmd_id_received(vb) != id)
			return false;
		vb_hint_wait(vb);
	}
}

/*
 * CPU time of the current task so far, in ns.  A round runs in one work
 * item, so the difference over the round is the vCPU time the round took,
 * its sleeps (waiting for ring room, for the device's buffers) excluded.
 */
static u64 vb_hint_task_cpu_ns(void)
{
	u64 ut, st;

	task_cputime_adjusted(current, &ut, &st);
	return ut + st;
}

static void vb_hint_round(struct vb_device *vb, u32 cmd_id)
{
	struct vb_hint *h = &vb->hint;
	u64 start = ktime_get_ns();
	u64 cpu_start = vb_hint_task_cpu_ns();
	u64 cpu;
	int ret;

	mutex_lock(&h->vq_lock);
	if (vb_hint_vq_dead(vb))
		goto out_unlock;

	vb_hint_reap(vb);

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

	if (h->cur_mode == VB_HINT_MODE_SCAN)
		ret = vb_scan_round(vb);
	else
		ret = vb_alloc_round(vb);
	if (ret < 0 && ret != -EINTR)
		dev_warn_ratelimited(&vb->vdev->dev, "hint: round error %d\n",
				     ret);
	virtqueue_kick(h->vq);

	vb_fault_inject_round(vb);

	vb_hint_send_stop(vb, cmd_id);

	vb_hint_drain(vb, VB_HINT_ROUND_DRAIN_MS, true, cmd_id);

	cpu = vb_hint_task_cpu_ns() - cpu_start;
	spin_lock(&h->lock);
	h->stats.last_round_ns = ktime_get_ns() - start;
	h->stats.last_round_cpu_ns = cpu;
	h->stats.rounds_cpu_ns += cpu;
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
			vb_hint_send_stop(vb, cmd_id);
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
	/* paused: resume looks at DONE again (vb_hint_pm_pause()) */
	if (!drained && !vb_hint_paused(vb) &&
	    vb_hint_cmd_id_received(vb) == VIRTIO_BALLOON_CMD_ID_DONE) {
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
	if (test_bit(VB_HINT_F_STOP_OWED, &h->flags)) {
		mutex_lock(&h->vq_lock);
		if (id == h->cmd_id_active && !vb_hint_vq_dead(vb))
			vb_hint_send_stop(vb, id);
		else
			clear_bit(VB_HINT_F_STOP_OWED, &h->flags);
		mutex_unlock(&h->vq_lock);
	}
	if (id == VIRTIO_BALLOON_CMD_ID_DONE) {
		vb_hint_done(vb);
		return;
	}
	if (id == VIRTIO_BALLOON_CMD_ID_STOP || id == h->cmd_id_active)
		return;

	if (test_bit(VB_HINT_F_PM_PAUSE, &h->flags))
		return;

	/* knobs written from now on apply to the next round */
	vb_core_settings_load(vb, &h->cur);
	h->cur_mode = vb_core_hint_mode(vb, h->cur.mode);
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

	err = vb_scan_init(vb);
	if (err)
		return err;
	h->wq = alloc_workqueue("vb-hint-%s",
				WQ_FREEZABLE | WQ_CPU_INTENSIVE | VB_WQ_PERCPU,
				0, dev_name(&vb->vdev->dev));
	if (!h->wq) {
		vb_scan_exit(vb);
		return -ENOMEM;
	}

	err = vb_compat_shrinker_register(&h->shrinker, vb_hint_shrink_count,
					  vb_hint_shrink_scan, vb,
					  "virtio-balloon-hint");
	if (err) {
		destroy_workqueue(h->wq);
		h->wq = NULL;
		vb_scan_exit(vb);
		return err;
	}
	h->shrinker_registered = true;
	return 0;
}

/*
 * System sleep is being prepared (@pause) or is over: a running round ends
 * promptly and none starts while paused.  After the pause, a command id
 * that arrived meanwhile is looked at.
 */
void vb_hint_pm_pause(struct vb_device *vb, bool pause)
{
	struct vb_hint *h = &vb->hint;

	if (!h->wq)
		return;
	if (pause) {
		set_bit(VB_HINT_F_PM_PAUSE, &h->flags);
		wake_up(&h->wait);
		flush_work(&h->work);
		return;
	}
	clear_bit(VB_HINT_F_PM_PAUSE, &h->flags);
	if (!test_bit(VB_HINT_F_STOPPING, &h->flags)) {
		set_bit(VB_HINT_F_CMD_CHANGED, &h->flags);
		queue_work(h->wq, &h->work);
	}
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
	clear_bit(VB_HINT_F_STOP_OWED, &h->flags);
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
	vb_scan_exit(vb);
	/* nothing may be left: the device was reset before */
	WARN_ON(!list_empty(&h->inflight) || !list_empty(&h->acked));
}

void vb_hint_stats_snapshot(struct vb_device *vb, struct vb_hint_stats *out)
{
	spin_lock(&vb->hint.lock);
	*out = vb->hint.stats;
	spin_unlock(&vb->hint.lock);
}

