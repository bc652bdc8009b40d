// SPDX-License-Identifier: GPL-2.0
/*
 * vb_fault.c - fault injection for the host tests.  Built only into the
 * test module (make VB_FAULT_INJECT=y, which the test image uses); the
 * installed and DKMS modules have none of it.  Module parameter:
 *
 *   fault_inject=1   add the files below to the device's debugfs
 *                    directory, /sys/kernel/debug/virtio_balloon/<dev>/
 *
 * inject_bad_hints accepts one of the names below; the next round sends
 * that malformed hint in addition to the normal ones.  The device is never
 * handed a page the guest uses: every fault that points at guest RAM points
 * into a block allocated here and held like any other hinted block.
 * out_of_ram and unmappable point at no guest memory at all.
 *
 * scan_walk, when read, walks all free lists (the per-CPU ones too) as a
 * scan round would, sends nothing, and reports the pages of the free
 * blocks taken, the time, the longest zone->lock hold, the pages taken
 * from per-CPU lists and the longest hold of their locks, and the free
 * memory found: the cost of the search alone, on any device.
 *
 * Coverage.  hinted_pfns, once written (anything), records the pages every
 * scan chain queued from then on; read, it lists them as "<pfn> <pages>"
 * ranges, one a line, lowest first, and a last line "beyond=<pages>" with
 * the pages it could not record (above the end of the nodes at the first
 * write).  Writing it again forgets them, and starts stayed_free again.
 * Both wait for the round in progress (vq_lock), so a read taken after a
 * round ended holds all of that round.  stayed_free samples the memory
 * map, not the free lists: a page is free when it is online, no tail of a
 * compound page, not reserved and nobody holds a reference (a page of a
 * buddy block or of a per-CPU list; also the tail of a high-order
 * allocation that is not compound, which no round hints).  Each write
 * takes a sample, without waiting for a round; a page stayed free if
 * every sample since hinted_pfns was written found it free.  Read (after
 * the round), it says how many samples, the pages that stayed free, those
 * hinted, and those both: the round's coverage of the memory that stayed
 * free through it.
 *
 * held_blocks, when read, describes the blocks alloc mode holds right now:
 * how many, how many of their pages are in ZONE_MOVABLE, and the
 * migratetype of every pageblock they cover (pb_<type>=N).
 *
 * Module parameters for the mm fences (vb_mm.c), writable at run time in
 * /sys/module/virtio_balloon/parameters/:
 *
 *   fault_self_check=1        the self-check counts one order-3 free block
 *                             more than the lists hold: it disagrees with
 *                             mm, and scan is refused (set at load: the
 *                             check runs at probe and on memory hotplug)
 *   fault_walk_delay_ms=N     every hold of a per-CPU list lock of
 *                             ZONE_MOVABLE sleeps N ms after it found the
 *                             zone's pagesets and before it locks them,
 *                             inside the offline fence (the memory a test
 *                             offlines is movable)
 *   fault_no_offline_fence=1  the walks leave the offline fence alone:
 *                             what the fence prevents can happen.  After
 *                             its delay a hold checks that the zone still
 *                             has the pagesets it found, and when an
 *                             offline freed them warns (a WARNING splat)
 *                             and skips them: freed per-CPU memory is not
 *                             something KASAN sees
 *
 * Failure points, each a directory: fail_restore makes a restore (after
 * freeze, suspend or hibernation) fail after the queues were found, the
 * way a failed allocation in the restore path would; fail_stop makes
 * sending a round's STOP id fail, the way a full ring or a failed
 * allocation would.  Where the kernel has the fault-inject framework
 * (CONFIG_FAULT_INJECTION_DEBUG_FS) each is a struct fault_attr with the
 * framework's directory (Documentation/fault-injection).  A test writes
 * 100 to probability and N to times to fail the next N passes.  Kernels
 * without the framework (Debian's) get a directory with those two files,
 * which mean the same (probability in percent, times -1 for no limit,
 * times 1 until written, as the framework).
 */

#include <linux/module.h>
#include <linux/mm.h>
#include <linux/slab.h>
#include <linux/debugfs.h>
#include <linux/uaccess.h>
#include <linux/seq_file.h>
#include <linux/string.h>
#include <linux/sizes.h>
#include <linux/log2.h>
#include <linux/nodemask.h>
#include <linux/random.h>
#include <linux/delay.h>
#include <linux/bitmap.h>

#include "vb.h"

/*
 * A debugfs file read through seq_file from __name##_show() and written
 * through __name##_write(): DEFINE_SHOW_ATTRIBUTE() with a write, which
 * the oldest kernel supported (6.1) has no helper for.
 */
#define VB_FAULT_RW_ATTRIBUTE(__name)					\
static int __name ## _open(struct inode *inode, struct file *file)	\
{									\
	return single_open(file, __name ## _show, inode->i_private);	\
}									\
									\
static const struct file_operations __name ## _fops = {		\
	.owner		= THIS_MODULE,					\
	.open		= __name ## _open,				\
	.read		= seq_read,					\
	.write		= __name ## _write,				\
	.llseek		= seq_lseek,					\
	.release	= single_release,				\
}

/* The device whose VB_FAULT_RW_ATTRIBUTE() file @file is */
static struct vb_device *vb_fault_file_device(struct file *file)
{
	struct seq_file *m = file->private_data;

	return m->private;
}

static bool vb_param_fault_inject;
module_param_named(fault_inject, vb_param_fault_inject, bool, 0444);
MODULE_PARM_DESC(fault_inject,
		 "Create debugfs fault injection files for host tests (default: 0)");

static bool vb_param_self_check;
module_param_named(fault_self_check, vb_param_self_check, bool, 0644);
MODULE_PARM_DESC(fault_self_check,
		 "Test: the free list self-check miscounts order 3 (default: 0)");

static unsigned int vb_param_walk_delay_ms;
module_param_named(fault_walk_delay_ms, vb_param_walk_delay_ms, uint, 0644);
MODULE_PARM_DESC(fault_walk_delay_ms,
		 "Test: sleep in every ZONE_MOVABLE per-CPU list hold before locking, ms (default: 0)");

static bool vb_param_no_fence;
module_param_named(fault_no_offline_fence, vb_param_no_fence, bool, 0644);
MODULE_PARM_DESC(fault_no_offline_fence,
		 "Test: walks ignore memory offline (default: 0)");

static bool vb_param_walk_isolated;
module_param_named(fault_walk_isolated, vb_param_walk_isolated, bool, 0644);
MODULE_PARM_DESC(fault_walk_isolated,
		 "Test: walks take the free blocks of isolated pageblocks too (default: 0)");

unsigned long vb_fault_self_check_skew(unsigned int order)
{
	return READ_ONCE(vb_param_self_check) && order == 3;
}

bool vb_fault_no_offline_fence(void)
{
	return READ_ONCE(vb_param_no_fence);
}

bool vb_fault_walk_isolated(void)
{
	return READ_ONCE(vb_param_walk_isolated);
}

/*
 * The delay of a per-CPU walk's hold (fault_walk_delay_ms), at @cpu's
 * pageset @pcp of @zone.  True: the zone's pagesets changed meanwhile (an
 * offline freed them): it warns, and the hold must not lock @pcp.
 */
bool vb_fault_walk_delay(struct zone *zone, struct per_cpu_pages *pcp,
			 unsigned int cpu)
{
	unsigned int ms = READ_ONCE(vb_param_walk_delay_ms);

	if (!ms || zone_idx(zone) != ZONE_MOVABLE)
		return false;
	msleep(ms);
	return WARN(per_cpu_ptr(READ_ONCE(zone->per_cpu_pageset), cpu) != pcp,
		    "virtio_balloon: per-CPU walk of zone %s is about to lock pagesets the zone freed\n",
		    zone->name);
}

static const char * const vb_fault_names[VB_FAULT_NR] = {
	[VB_FAULT_ZERO_LEN] = "zero_len",
	[VB_FAULT_OUT_OF_RAM] = "out_of_ram",
	[VB_FAULT_STALE_ID] = "stale_id",
	[VB_FAULT_MISALIGNED] = "misaligned",
	[VB_FAULT_OVERSIZED_CHAIN] = "oversized_chain",
	[VB_FAULT_SHORT_CMD] = "short_cmd",
	[VB_FAULT_UNMAPPABLE] = "unmappable",
};

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
	if (vb_hint_wait_room(vb, descs + 1, ULONG_MAX, false))
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
	case VB_FAULT_UNMAPPABLE:
		/*
		 * Without the DMA API the ring carries sg_phys() =
		 * page_to_phys(page) + offset.  Take the last pfn of RAM
		 * (its memmap exists; its memory is not touched) and an
		 * offset that lands on the next 1 GiB boundary at or above
		 * the end of RAM: no guest RAM is there.  One page of it
		 * fits the host's bounce buffer and reaches the device as
		 * a hint to ignore; unmappable takes two pages, which the
		 * host cannot map at all, so popping the buffer breaks the
		 * device.
		 */
		n = kind == VB_FAULT_UNMAPPABLE ? 2 : 1;
		end_pfn = vb_fault_end_pfn();
		if (!end_pfn || !pfn_valid(end_pfn - 1))
			break;
		base = PFN_PHYS(end_pfn - 1);
		target = ALIGN(PFN_PHYS(end_pfn), SZ_1G);
		if (target - base > UINT_MAX - n * PAGE_SIZE)
			break;
		sg_init_table(sg, 1);
		sg_set_page(&sg[0], pfn_to_page(end_pfn - 1), n * PAGE_SIZE,
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
			sg_set_page(&big[i], pfn_to_page(page_to_pfn(page) + i),
				    PAGE_SIZE, 0);
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
void vb_fault_inject_round(struct vb_device *vb)
{
	struct vb_fault_state *f = &vb->fault;
	int kind, err;

	if (!READ_ONCE(f->pending))
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

static ssize_t vb_fault_write(struct file *file, const char __user *ubuf,
			      size_t len, loff_t *ppos)
{
	struct vb_device *vb = vb_fault_file_device(file);
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

VB_FAULT_RW_ATTRIBUTE(vb_fault);

static void vb_fault_point_init(struct vb_fault_point *p, const char *name,
				struct dentry *dir)
{
#ifdef CONFIG_FAULT_INJECTION_DEBUG_FS
	p->attr = (struct fault_attr)FAULT_ATTR_INITIALIZER;
	fault_create_debugfs_attr(name, dir, &p->attr);
#else
	dir = debugfs_create_dir(name, dir);
	p->probability = 0;
	atomic_set(&p->times, 1);
	debugfs_create_u32("probability", 0600, dir, &p->probability);
	debugfs_create_atomic_t("times", 0600, dir, &p->times);
#endif
}

/* Does this pass through failure point @p fail? */
static bool vb_fault_point_fails(struct vb_fault_point *p)
{
#ifdef CONFIG_FAULT_INJECTION_DEBUG_FS
	return should_fail(&p->attr, 1);
#else
	u32 prob = READ_ONCE(p->probability);

	if (!prob || !atomic_read(&p->times))
		return false;
	if (prob < 100 && get_random_u32() % 100 >= prob)
		return false;
	if (atomic_read(&p->times) != -1)
		return atomic_add_unless(&p->times, -1, 0);
	return true;
#endif
}

bool vb_fault_fail_restore(struct vb_device *vb)
{
	return vb_fault_point_fails(&vb->fault.fail_restore);
}

bool vb_fault_fail_stop(struct vb_device *vb)
{
	return vb_fault_point_fails(&vb->fault.fail_stop);
}

static int vb_fault_walk_show(struct seq_file *m, void *unused)
{
	struct vb_device *vb = m->private;
	struct vb_scan_walk w;
	int i;

	mutex_lock(&vb->hint.vq_lock);
	vb_scan_walk(vb, &w);
	mutex_unlock(&vb->hint.vq_lock);
	seq_printf(m, "pfns=%llu ns=%llu max_hold_ns=%llu holds=%llu hold_ns=%llu ranges=%llu free_pages=%llu pcp_pfns=%llu max_pcp_hold_ns=%llu pcp_holds=%llu isolated_free=%llu isolated_taken=%llu hold_us_log2=",
		   w.pfns, w.ns, w.max_hold_ns, w.holds, w.hold_ns, w.ranges,
		   w.free_pages, w.pcp_pfns, w.pcp_max_hold_ns, w.pcp_holds,
		   w.isolated_free, w.isolated_taken);
	for (i = 0; i < VB_MM_HOLD_HIST; i++)
		seq_printf(m, "%s%u", i ? "," : "", w.hold_hist[i]);
	seq_putc(m, '\n');
	return 0;
}

DEFINE_SHOW_ATTRIBUTE(vb_fault_walk);

#ifdef CONFIG_SPARSEMEM
static const char * const vb_fault_mt_names[MIGRATE_TYPES] = {
	[MIGRATE_UNMOVABLE] = "unmovable",
	[MIGRATE_MOVABLE] = "movable",
	[MIGRATE_RECLAIMABLE] = "reclaimable",
	[MIGRATE_HIGHATOMIC] = "highatomic",
#ifdef CONFIG_CMA
	[MIGRATE_CMA] = "cma",
#endif
#ifdef CONFIG_MEMORY_ISOLATION
	[MIGRATE_ISOLATE] = "isolate",
#endif
};

/* What the held blocks are made of (debugfs held_blocks) */
struct vb_fault_held {
	unsigned long blocks;
	unsigned long pages;
	unsigned long movable_zone_pages;
	/* pageblocks covered, by migratetype; [MIGRATE_TYPES]: unknown */
	unsigned long pageblocks[MIGRATE_TYPES + 1];
};

static void vb_fault_held_block(struct vb_fault_held *f, struct page *page)
{
	unsigned long nr = 1UL << vb_hint_block_order(page);
	unsigned long pfn = page_to_pfn(page), end = pfn + nr;
	unsigned int mt;

	f->blocks++;
	f->pages += nr;
	if (page_zonenum(page) == ZONE_MOVABLE)
		f->movable_zone_pages += nr;
	for (pfn = ALIGN_DOWN(pfn, pageblock_nr_pages); pfn < end;
	     pfn += pageblock_nr_pages) {
		mt = vb_mm_pageblock_migratetype(pfn);
		f->pageblocks[min_t(unsigned int, mt, MIGRATE_TYPES)]++;
	}
}

static int vb_fault_held_show(struct seq_file *m, void *unused)
{
	struct vb_device *vb = m->private;
	struct vb_hint *h = &vb->hint;
	struct vb_fault_held f = {};
	struct vb_hint_chain *c;
	struct page *page;
	int mt;

	spin_lock(&h->lock);
	list_for_each_entry(c, &h->inflight, node)
		list_for_each_entry(page, &c->blocks, lru)
			vb_fault_held_block(&f, page);
	list_for_each_entry(page, &h->acked, lru)
		vb_fault_held_block(&f, page);
	spin_unlock(&h->lock);

	seq_printf(m, "blocks=%lu pages=%lu zone_movable_pages=%lu",
		   f.blocks, f.pages, f.movable_zone_pages);
	for (mt = 0; mt < MIGRATE_TYPES; mt++)
		seq_printf(m, " pb_%s=%lu", vb_fault_mt_names[mt],
			   f.pageblocks[mt]);
	seq_printf(m, " pb_unknown=%lu\n", f.pageblocks[MIGRATE_TYPES]);
	return 0;
}

DEFINE_SHOW_ATTRIBUTE(vb_fault_held);
#endif

/* Called by scan for every range of a chain it queued, vq_lock held */
void vb_fault_note_hinted(struct vb_device *vb, unsigned long pfn,
			  unsigned long nr)
{
	struct vb_fault_state *f = &vb->fault;
	unsigned long in;

	lockdep_assert_held(&vb->hint.vq_lock);
	if (!f->hinted)
		return;
	in = pfn < f->rec_pfns ? min(nr, f->rec_pfns - pfn) : 0;
	if (in)
		bitmap_set(f->hinted, pfn, in);
	f->hinted_beyond += nr - in;
}

static int vb_fault_hinted_show(struct seq_file *m, void *unused)
{
	struct vb_device *vb = m->private;
	struct vb_fault_state *f = &vb->fault;
	unsigned long start, end = 0;

	mutex_lock(&vb->hint.vq_lock);
	while (f->hinted) {
		start = find_next_bit(f->hinted, f->rec_pfns, end);
		if (start >= f->rec_pfns)
			break;
		end = find_next_zero_bit(f->hinted, f->rec_pfns, start);
		seq_printf(m, "%lu %lu\n", start, end - start);
	}
	seq_printf(m, "beyond=%lu\n", f->hinted_beyond);
	mutex_unlock(&vb->hint.vq_lock);
	return 0;
}

static ssize_t vb_fault_hinted_write(struct file *file,
				     const char __user *ubuf, size_t len,
				     loff_t *ppos)
{
	struct vb_device *vb = vb_fault_file_device(file);
	struct vb_fault_state *f = &vb->fault;
	int err = 0;

	mutex_lock(&vb->hint.vq_lock);
	mutex_lock(&f->stay_lock);
	if (!f->hinted) {
		f->rec_pfns = vb_fault_end_pfn();
		f->hinted = bitmap_zalloc(f->rec_pfns, GFP_KERNEL);
		f->stay = bitmap_zalloc(f->rec_pfns, GFP_KERNEL);
		if (!f->hinted || !f->stay) {
			bitmap_free(f->hinted);
			bitmap_free(f->stay);
			f->hinted = NULL;
			f->stay = NULL;
			err = -ENOMEM;
		}
	} else {
		bitmap_zero(f->hinted, f->rec_pfns);
	}
	f->hinted_beyond = 0;
	f->stay_samples = 0;
	mutex_unlock(&f->stay_lock);
	mutex_unlock(&vb->hint.vq_lock);
	return err ?: len;
}

VB_FAULT_RW_ATTRIBUTE(vb_fault_hinted);

/* Whether the memory map says @pfn is a free page (see Coverage above) */
static bool vb_fault_page_free(unsigned long pfn)
{
	struct page *page = pfn_to_online_page(pfn);

	return page && !PageTail(page) && !page_ref_count(page) &&
	       !PageReserved(page);
}

static int vb_fault_stay_show(struct seq_file *m, void *unused)
{
	struct vb_device *vb = m->private;
	struct vb_fault_state *f = &vb->fault;
	unsigned long free = 0, both = 0, hinted = 0, pfn;

	mutex_lock(&vb->hint.vq_lock);
	mutex_lock(&f->stay_lock);
	if (f->stay && f->stay_samples) {
		free = bitmap_weight(f->stay, f->rec_pfns);
		hinted = bitmap_weight(f->hinted, f->rec_pfns);
		for_each_set_bit(pfn, f->stay, f->rec_pfns)
			both += test_bit(pfn, f->hinted);
	}
	seq_printf(m, "samples=%u free=%lu hinted=%lu covered=%lu\n",
		   f->stay_samples, free, hinted, both);
	mutex_unlock(&f->stay_lock);
	mutex_unlock(&vb->hint.vq_lock);
	return 0;
}

static ssize_t vb_fault_stay_write(struct file *file,
				   const char __user *ubuf, size_t len,
				   loff_t *ppos)
{
	struct vb_fault_state *f = &vb_fault_file_device(file)->fault;
	unsigned long pfn;

	mutex_lock(&f->stay_lock);
	if (!f->stay) {
		mutex_unlock(&f->stay_lock);
		return -ENODATA;	/* hinted_pfns was never written */
	}
	for (pfn = 0; pfn < f->rec_pfns; pfn++) {
		bool free = vb_fault_page_free(pfn);

		if (!f->stay_samples)
			__assign_bit(pfn, f->stay, free);
		else if (!free)
			__clear_bit(pfn, f->stay);
		if (!(pfn % SZ_4K))
			cond_resched();
	}
	f->stay_samples++;
	mutex_unlock(&f->stay_lock);
	return len;
}

VB_FAULT_RW_ATTRIBUTE(vb_fault_stay);

void vb_fault_init(struct vb_device *vb)
{
	struct dentry *dir = vb->debugfs_dir;

	if (!vb_param_fault_inject || IS_ERR_OR_NULL(dir))
		return;
	vb_fault_point_init(&vb->fault.fail_restore, "fail_restore", dir);
	if (vb->hint.wq) {
		vb_fault_point_init(&vb->fault.fail_stop, "fail_stop", dir);
		debugfs_create_file("inject_bad_hints", 0600, dir, vb,
				    &vb_fault_fops);
		debugfs_create_file("scan_walk", 0400, dir, vb,
				    &vb_fault_walk_fops);
		mutex_init(&vb->fault.stay_lock);
		debugfs_create_file("hinted_pfns", 0600, dir, vb,
				    &vb_fault_hinted_fops);
		debugfs_create_file("stayed_free", 0600, dir, vb,
				    &vb_fault_stay_fops);
#ifdef CONFIG_SPARSEMEM
		debugfs_create_file("held_blocks", 0400, dir, vb,
				    &vb_fault_held_fops);
#endif
	}
}

/* After the debugfs files are gone: nothing reads the record any more */
void vb_fault_exit(struct vb_device *vb)
{
	bitmap_free(vb->fault.hinted);
	bitmap_free(vb->fault.stay);
	vb->fault.hinted = NULL;
	vb->fault.stay = NULL;
}
