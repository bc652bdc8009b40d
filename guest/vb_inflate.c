// SPDX-License-Identifier: GPL-2.0
/*
 * vb_inflate.c - inflate/deflate with balloon compaction, MUST_TELL_HOST,
 * the statistics queue and deflate-on-OOM.
 *
 * All counts here are in 4 KiB balloon pages.  A deflated page is always
 * reported to the host before it is handed back to the page allocator, which
 * satisfies MUST_TELL_HOST whether or not it was negotiated.
 */

#include <linux/mm.h>
#include <linux/swap.h>
#include <linux/vmstat.h>
#include <linux/delay.h>
#include <linux/oom.h>

#include "vb.h"

static_assert(sizeof(struct vb_wire_stat) == VB_WIRE_STAT_SIZE);

void vb_inflate_ack(struct virtqueue *vq)
{
	struct vb_device *vb = vq->vdev->priv;

	wake_up(&vb->acked);
}

/* Send vb->pfns on @vq and wait until the host has used the buffer */
static void vb_inflate_tell_host(struct vb_device *vb, struct virtqueue *vq)
{
	struct scatterlist sg;
	unsigned int len;
	int err;

	/* no queues after a failed restore: the device is gone */
	if (!vq)
		return;
	sg_init_one(&sg, vb->pfns, sizeof(vb->pfns[0]) * vb->num_pfns);

	/* only one buffer is ever outstanding: the queue has room */
	err = virtqueue_add_outbuf(vq, &sg, 1, vb, GFP_KERNEL);
	if (WARN_ON_ONCE(err))
		return;
	virtqueue_kick(vq);

	wait_event(vb->acked, virtqueue_get_buf(vq, &len));
}

static u32 vb_inflate_page_to_pfn(struct page *page)
{
	unsigned long pfn = page_to_pfn(page);

	BUILD_BUG_ON(PAGE_SHIFT < VIRTIO_BALLOON_PFN_SHIFT);
	return pfn * VB_PAGES_PER_PAGE;
}

static void vb_inflate_set_pfns(struct vb_device *vb, __virtio32 pfns[],
				struct page *page)
{
	u32 first = vb_inflate_page_to_pfn(page);
	unsigned int i;

	BUILD_BUG_ON(VB_PAGES_PER_PAGE > VB_PFNS_MAX);
	for (i = 0; i < VB_PAGES_PER_PAGE; i++)
		pfns[i] = cpu_to_virtio32(vb->vdev, first + i);
}

/*
 * Without DEFLATE_ON_OOM inflated pages leave the zone's managed pages.
 * Where the common code counts them (compat.h), this only tells it to.
 */
static bool vb_inflate_adjusts_managed(struct vb_device *vb)
{
	return !vb_has(vb, VIRTIO_BALLOON_F_DEFLATE_ON_OOM);
}

/* The driver itself adjusts the managed page count */
static bool vb_inflate_driver_counts(struct vb_device *vb)
{
#ifdef VB_HAVE_BALLOON_CORE_ACCOUNTS
	return false;
#else
	return vb_inflate_adjusts_managed(vb);
#endif
}

static unsigned int vb_inflate_fill(struct vb_device *vb, size_t num)
{
	unsigned int done;
	struct page *page;
	LIST_HEAD(pages);

	num = min_t(size_t, num, VB_PFNS_MAX);

	for (done = 0; done < num; done += VB_PAGES_PER_PAGE) {
		page = balloon_page_alloc();
		if (!page) {
			dev_info_ratelimited(&vb->vdev->dev,
					     "Out of puff! Can't get %u pages\n",
					     VB_PAGES_PER_PAGE);
			/* give the allocator time before the next attempt */
			msleep(200);
			break;
		}
		list_add(&page->lru, &pages);
	}

	mutex_lock(&vb->balloon_lock);
	vb->num_pfns = 0;
	while ((page = list_first_entry_or_null(&pages, struct page, lru))) {
		/* the balloon owns page->lru from enqueue on */
		list_del(&page->lru);
		balloon_page_enqueue(&vb->bdev_info, page);
		vb_inflate_set_pfns(vb, vb->pfns + vb->num_pfns, page);
		vb->num_pages += VB_PAGES_PER_PAGE;
		if (vb_inflate_driver_counts(vb))
			adjust_managed_page_count(page, -1);
		vb->num_pfns += VB_PAGES_PER_PAGE;
	}
	done = vb->num_pfns;
	if (vb->num_pfns)
		vb_inflate_tell_host(vb, vb->inflate_vq);
	mutex_unlock(&vb->balloon_lock);

	return done;
}

static void vb_inflate_release_pages(struct vb_device *vb,
				     struct list_head *pages)
{
	struct page *page, *next;

	list_for_each_entry_safe(page, next, pages, lru) {
		if (vb_inflate_driver_counts(vb))
			adjust_managed_page_count(page, 1);
		list_del(&page->lru);
		/* drop the balloon reference */
		put_page(page);
	}
}

static unsigned int vb_inflate_leak(struct vb_device *vb, size_t num)
{
	unsigned int done;
	struct page *page;
	LIST_HEAD(pages);

	num = min_t(size_t, num, VB_PFNS_MAX);

	mutex_lock(&vb->balloon_lock);
	num = min_t(size_t, num, vb->num_pages);
	for (vb->num_pfns = 0; vb->num_pfns < num;
	     vb->num_pfns += VB_PAGES_PER_PAGE) {
		page = balloon_page_dequeue(&vb->bdev_info);
		if (!page)
			break;
		vb_inflate_set_pfns(vb, vb->pfns + vb->num_pfns, page);
		list_add(&page->lru, &pages);
		vb->num_pages -= VB_PAGES_PER_PAGE;
	}
	done = vb->num_pfns;

	/* tell the host first, then reuse: required by MUST_TELL_HOST */
	if (vb->num_pfns)
		vb_inflate_tell_host(vb, vb->deflate_vq);
	vb_inflate_release_pages(vb, &pages);
	mutex_unlock(&vb->balloon_lock);

	return done;
}

s64 vb_inflate_towards_target(struct vb_device *vb)
{
	u32 num_pages;
	s64 target;

	/* the balloon config space is little-endian, even when legacy */
	virtio_cread_le(vb->vdev, struct vb_wire_config, num_pages, &num_pages);

	/* round to whole guest pages to avoid inflate/deflate ping-pong */
	target = ALIGN(num_pages, VB_PAGES_PER_PAGE);
	return target - vb->num_pages;
}

void vb_inflate_update_actual(struct vb_device *vb)
{
	u32 actual = vb->num_pages;

	virtio_cwrite_le(vb->vdev, struct vb_wire_config, actual, &actual);
}

void vb_inflate_size_work_fn(struct work_struct *work)
{
	struct vb_device *vb = container_of(work, struct vb_device, size_work);
	s64 diff;

	vb_core_wake_taken(vb, VB_WAKE_SIZE);
	/* no queues after a failed restore */
	diff = READ_ONCE(vb->inflate_vq) ? vb_inflate_towards_target(vb) : 0;
	if (diff) {
		if (diff > 0)
			diff -= vb_inflate_fill(vb, diff);
		else
			diff += vb_inflate_leak(vb, -diff);
		vb_inflate_update_actual(vb);
	}

	/* more to do: the wakeup source stays held for the next pass */
	if (diff)
		queue_work(system_freezable_wq, work);
	else
		vb_core_wake_end(vb);
}

/* Give every ballooned page back (remove/freeze) */
void vb_inflate_release_all(struct vb_device *vb)
{
	while (vb->num_pages)
		vb_inflate_leak(vb, vb->num_pages);
}

#ifdef VB_BALLOON_MIGRATION
/*
 * Called by compaction, under the page lock, with @page isolated: replace
 * @page by @newpage in the balloon.  The host learns about the new page
 * (inflate) before the old one is released (deflate).
 */
static int vb_inflate_migratepage(struct balloon_dev_info *bdev_info,
				  struct page *newpage, struct page *page,
				  enum migrate_mode mode)
{
	struct vb_device *vb = container_of(bdev_info, struct vb_device,
					    bdev_info);
#ifndef VB_HAVE_BALLOON_CORE_ACCOUNTS
	unsigned long flags;
#endif

	/*
	 * Never wait for balloon_lock here: fill/leak may hold it while
	 * allocating, which can itself trigger compaction.  Compaction
	 * retries later.
	 */
	if (!mutex_trylock(&vb->balloon_lock))
		return -EAGAIN;

#ifndef VB_HAVE_BALLOON_CORE_ACCOUNTS
	/* the balloon reference of the new page */
	get_page(newpage);

	/* managed page counts are per zone: move the adjustment along */
	if (vb_inflate_adjusts_managed(vb) &&
	    page_zone(page) != page_zone(newpage)) {
		adjust_managed_page_count(page, 1);
		adjust_managed_page_count(newpage, -1);
	}

	spin_lock_irqsave(&bdev_info->pages_lock, flags);
	balloon_page_insert(bdev_info, newpage);
	bdev_info->isolated_pages--;
	__count_vm_event(BALLOON_MIGRATE);
	spin_unlock_irqrestore(&bdev_info->pages_lock, flags);
#endif

	vb->num_pfns = VB_PAGES_PER_PAGE;
	vb_inflate_set_pfns(vb, vb->pfns, newpage);
	vb_inflate_tell_host(vb, vb->inflate_vq);

	vb->num_pfns = VB_PAGES_PER_PAGE;
	vb_inflate_set_pfns(vb, vb->pfns, page);
	vb_inflate_tell_host(vb, vb->deflate_vq);

	mutex_unlock(&vb->balloon_lock);

#ifndef VB_HAVE_BALLOON_CORE_ACCOUNTS
	balloon_page_finalize(page);
	/* drop the balloon reference of the old page */
	put_page(page);
#endif

	return VB_COMPAT_MIGRATE_SUCCESS;
}
#endif /* VB_BALLOON_MIGRATION */

void vb_inflate_init(struct vb_device *vb)
{
	INIT_WORK(&vb->size_work, vb_inflate_size_work_fn);
	INIT_WORK(&vb->stats_work, vb_stats_work_fn);
	mutex_init(&vb->balloon_lock);
	init_waitqueue_head(&vb->acked);
	balloon_devinfo_init(&vb->bdev_info);
#ifdef VB_HAVE_BALLOON_CORE_ACCOUNTS
	vb->bdev_info.adjust_managed_page_count = vb_inflate_adjusts_managed(vb);
#endif
#ifdef VB_BALLOON_MIGRATION
	vb->bdev_info.migratepage = vb_inflate_migratepage;
#endif
}

/* Statistics queue */

static void vb_stats_set(struct vb_device *vb, unsigned int idx, u16 tag,
			 u64 val)
{
	__virtio64 wire_val;

	if (WARN_ON_ONCE(idx >= VIRTIO_BALLOON_S_NR))
		return;
	wire_val = cpu_to_virtio64(vb->vdev, val);
	vb->stats[idx].tag = cpu_to_virtio16(vb->vdev, tag);
	memcpy(vb->stats[idx].val, &wire_val, sizeof(wire_val));
}

static u64 vb_stats_bytes(unsigned long pages)
{
	return (u64)pages << PAGE_SHIFT;
}

#ifdef CONFIG_VM_EVENT_COUNTERS
/*
 * Tags 10-15 (Linux 6.12's set): OOM kills, allocation stalls summed over
 * the zones, and the pages kswapd and direct reclaim scanned and reclaimed
 * (in bytes).  Every kernel this driver builds for counts these events.
 */
static unsigned int vb_stats_update_reclaim(struct vb_device *vb,
					    unsigned int idx,
					    const unsigned long *events)
{
	unsigned long stalls = 0;
	int zid;

	for (zid = 0; zid < MAX_NR_ZONES; zid++)
		stalls += events[ALLOCSTALL_NORMAL - ZONE_NORMAL + zid];
	vb_stats_set(vb, idx++, VIRTIO_BALLOON_S_OOM_KILL, events[OOM_KILL]);
	vb_stats_set(vb, idx++, VIRTIO_BALLOON_S_ALLOC_STALL, stalls);
	vb_stats_set(vb, idx++, VIRTIO_BALLOON_S_ASYNC_SCAN,
		     vb_stats_bytes(events[PGSCAN_KSWAPD]));
	vb_stats_set(vb, idx++, VIRTIO_BALLOON_S_DIRECT_SCAN,
		     vb_stats_bytes(events[PGSCAN_DIRECT]));
	vb_stats_set(vb, idx++, VIRTIO_BALLOON_S_ASYNC_RECLAIM,
		     vb_stats_bytes(events[PGSTEAL_KSWAPD]));
	vb_stats_set(vb, idx++, VIRTIO_BALLOON_S_DIRECT_RECLAIM,
		     vb_stats_bytes(events[PGSTEAL_DIRECT]));
	return idx;
}
#endif

static unsigned int vb_stats_update(struct vb_device *vb)
{
	unsigned int idx = 0;
	struct sysinfo si;
	long available;
	unsigned long caches;
#ifdef CONFIG_VM_EVENT_COUNTERS
	unsigned long events[NR_VM_EVENT_ITEMS];

	all_vm_events(events);
	vb_stats_set(vb, idx++, VIRTIO_BALLOON_S_SWAP_IN,
		     vb_stats_bytes(events[PSWPIN]));
	vb_stats_set(vb, idx++, VIRTIO_BALLOON_S_SWAP_OUT,
		     vb_stats_bytes(events[PSWPOUT]));
	vb_stats_set(vb, idx++, VIRTIO_BALLOON_S_MAJFLT, events[PGMAJFAULT]);
	vb_stats_set(vb, idx++, VIRTIO_BALLOON_S_MINFLT, events[PGFAULT]);
#ifdef CONFIG_HUGETLB_PAGE
	vb_stats_set(vb, idx++, VIRTIO_BALLOON_S_HTLB_PGALLOC,
		     events[HTLB_BUDDY_PGALLOC]);
	vb_stats_set(vb, idx++, VIRTIO_BALLOON_S_HTLB_PGFAIL,
		     events[HTLB_BUDDY_PGALLOC_FAIL]);
#endif
	idx = vb_stats_update_reclaim(vb, idx, events);
#endif
	si_meminfo(&si);
	available = si_mem_available();
	caches = global_node_page_state(NR_FILE_PAGES);

	vb_stats_set(vb, idx++, VIRTIO_BALLOON_S_MEMFREE,
		     vb_stats_bytes(si.freeram));
	vb_stats_set(vb, idx++, VIRTIO_BALLOON_S_MEMTOT,
		     vb_stats_bytes(si.totalram));
	vb_stats_set(vb, idx++, VIRTIO_BALLOON_S_AVAIL,
		     vb_stats_bytes(max(available, 0L)));
	vb_stats_set(vb, idx++, VIRTIO_BALLOON_S_CACHES,
		     vb_stats_bytes(caches));
	return idx;
}

static int vb_stats_send(struct vb_device *vb, unsigned int num)
{
	struct scatterlist sg;
	int err;

	sg_init_one(&sg, vb->stats, sizeof(vb->stats[0]) * num);
	err = virtqueue_add_outbuf(vb->stats_vq, &sg, 1, vb, GFP_KERNEL);
	if (!err)
		virtqueue_kick(vb->stats_vq);
	return err;
}

/*
 * The stats queue runs backwards: we keep one buffer queued; the host
 * "uses" it to request fresh statistics, and we queue a refilled buffer.
 */
int vb_stats_prime(struct vb_device *vb)
{
	int err = vb_stats_send(vb, vb_stats_update(vb));

	if (err)
		dev_warn(&vb->vdev->dev, "%s: add stats buffer failed: %d\n",
			 __func__, err);
	return err;
}

void vb_stats_request(struct virtqueue *vq)
{
	struct vb_device *vb = vq->vdev->priv;

	spin_lock(&vb->stop_update_lock);
	if (!vb->stop_update) {
		vb_core_wake_begin(vb, VB_WAKE_STATS);
		queue_work(system_freezable_wq, &vb->stats_work);
	}
	spin_unlock(&vb->stop_update_lock);
}

void vb_stats_work_fn(struct work_struct *work)
{
	struct vb_device *vb = container_of(work, struct vb_device, stats_work);
	unsigned int num, len;

	vb_core_wake_taken(vb, VB_WAKE_STATS);
	num = vb_stats_update(vb);
	if (vb->stats_vq && virtqueue_get_buf(vb->stats_vq, &len))
		vb_stats_send(vb, num);
	vb_core_wake_end(vb);
}

/* Deflate on OOM */

static int vb_oom_notify(struct notifier_block *nb, unsigned long dummy,
			 void *parm)
{
	struct vb_device *vb = container_of(nb, struct vb_device, oom_nb);
	unsigned long *freed = parm;

	*freed += vb_inflate_leak(vb, VB_OOM_NR_PAGES) / VB_PAGES_PER_PAGE;
	vb_inflate_update_actual(vb);
	return NOTIFY_OK;
}

int vb_oom_register(struct vb_device *vb)
{
	int err;

	if (!vb_has(vb, VIRTIO_BALLOON_F_DEFLATE_ON_OOM))
		return 0;
	vb->oom_nb.notifier_call = vb_oom_notify;
	vb->oom_nb.priority = VB_OOM_NOTIFY_PRIORITY;
	err = register_oom_notifier(&vb->oom_nb);
	if (err)
		return err;
	vb->oom_registered = true;
	return 0;
}

void vb_oom_unregister(struct vb_device *vb)
{
	if (!vb->oom_registered)
		return;
	unregister_oom_notifier(&vb->oom_nb);
	vb->oom_registered = false;
}
