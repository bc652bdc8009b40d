/* SPDX-License-Identifier: GPL-2.0 */
/*
 * vb.h - internal state and prototypes of the virtio_balloon module.
 *
 * See the design comment at the top of vb_core.c for the modes and units.
 * One struct vb_device exists per virtio balloon device; every function is
 * prefixed by its concern: vb_core_ (probe, PM, settings, mode rule),
 * vb_inflate_, vb_stats_, vb_oom_, vb_hint_ (round engine), vb_scan_ and
 * vb_alloc_ (the two searches for free memory), vb_report_, vb_sysfs_,
 * vb_debugfs_, vb_fault_ (test builds only).
 */
#ifndef VB_H
#define VB_H

#include <linux/virtio.h>
#include <linux/virtio_config.h>
#include <linux/workqueue.h>
#include <linux/mutex.h>
#include <linux/spinlock.h>
#include <linux/wait.h>
#include <linux/list.h>
#include <linux/notifier.h>
#include <linux/scatterlist.h>
#include <linux/page_reporting.h>
#include <linux/fault-inject.h>

#include "virtio_balloon_wire.h"
#include "compat.h"

#define VB_VERSION		"1.0.0"

/* Guest pages are made of this many 4 KiB balloon pages */
#define VB_PAGES_PER_PAGE	((unsigned int)(PAGE_SIZE >> VIRTIO_BALLOON_PFN_SHIFT))
/* PFNs sent per inflate/deflate buffer */
#define VB_PFNS_MAX		256
/* Balloon pages (4 KiB) released per OOM notification */
#define VB_OOM_NR_PAGES		256
#define VB_OOM_NOTIFY_PRIORITY	80

/* Hinting: orders are buddy orders, 0 .. VB_HINT_MAX_ORDER */
#define VB_HINT_MAX_ORDER	VB_MAX_BUDDY_ORDER
#define VB_HINT_NR_ORDERS	(VB_HINT_MAX_ORDER + 1)
/*
 * The free-list walk (vb_mm.c): free blocks taken from the free lists per
 * hold of zone->lock (bounded as mm/page_reporting and compaction bound
 * their holds; each block is a read of a struct page far from the last
 * one, so a hold takes 16, no longer than the 64 sequential memmap steps
 * of a PFN walk), times a walk of one free list may lose its place and
 * start again, largest range, the buckets of the hold histogram, and the
 * ranges one hold of a per-CPU list lock can stage before it is dropped.
 */
#define VB_MM_STEPS_PER_LOCK		16UL
#define VB_MM_MAX_RESTARTS		4U
#define VB_MM_MAX_RANGE			(1UL << (30 - PAGE_SHIFT))
#define VB_MM_HOLD_HIST			16
#define VB_MM_STAGE_RANGES		8192U
/*
 * Scan mode, per-CPU free lists: default and largest pcp_max_pages (pages
 * a round takes from the lists of one CPU in one zone).
 */
#define VB_SCAN_PCP_PAGES		(128U << 10)
#define VB_SCAN_PCP_MAX_PAGES		BIT(20)
/* Upper bounds of the batching knobs */
#define VB_HINT_MAX_BPC		64
#define VB_HINT_MAX_CPK		256
/*
 * Alloc mode: default cap of the block memory in flight (KiB), and its
 * smallest value, one block of the largest order
 */
#define VB_ALLOC_INFLIGHT_KB		(256U << 10)
#define VB_ALLOC_MIN_INFLIGHT_KB	\
	((unsigned int)((PAGE_SIZE << VB_HINT_MAX_ORDER) >> 10))

/* vb_hint.flags bits */
enum {
	/* config space changed: re-read the command id */
	VB_HINT_F_CMD_CHANGED,
	/* the device returned buffers on the free page vq */
	VB_HINT_F_VQ_USED,
	/* remove/freeze in progress: stop at once, start nothing */
	VB_HINT_F_STOPPING,
	/* run the worker again when the device uses a buffer */
	VB_HINT_F_RETRY,
	/* system sleep is being prepared: end rounds, start none */
	VB_HINT_F_PM_PAUSE,
	/* the active round's STOP id is not queued yet */
	VB_HINT_F_STOP_OWED,
};

/* Fault kinds for the host tests (debugfs inject_bad_hints, test builds) */
enum vb_fault {
	VB_FAULT_ZERO_LEN,
	VB_FAULT_OUT_OF_RAM,
	VB_FAULT_STALE_ID,
	VB_FAULT_MISALIGNED,
	VB_FAULT_OVERSIZED_CHAIN,
	VB_FAULT_SHORT_CMD,
	VB_FAULT_UNMAPPABLE,
	VB_FAULT_NR,
};

/*
 * How a round finds free memory (see the design comment in vb_hint.c):
 * scan reports free buddy blocks where they are, alloc takes them from the
 * allocator and holds them until DONE.  AUTO is only ever requested: the
 * core resolves it to SCAN or ALLOC per device (vb_core_hint_mode()).
 */
enum vb_hint_mode {
	VB_HINT_MODE_SCAN,
	VB_HINT_MODE_ALLOC,
	VB_HINT_MODE_AUTO,
	VB_HINT_NR_MODES,
};

/*
 * The settings of one device, owned by vb_core.c: sysfs validates a knob
 * and stores it through vb_core_settings_set(), a round works on a copy
 * taken by vb_core_settings_load() when it starts.  A knob names one
 * member (vb_core_knob()).
 */
enum vb_knob {
	VB_KNOB_ENABLED,
	VB_KNOB_MODE,
	VB_KNOB_MIN_ORDER,
	VB_KNOB_ALLOC_MIN_ORDER,
	VB_KNOB_BLOCKS_PER_CHAIN,
	VB_KNOB_CHAINS_PER_KICK,
	VB_KNOB_RESERVE_KB,
	VB_KNOB_ALLOC_MAX_INFLIGHT_KB,
	VB_KNOB_PCP_MAX_PAGES,
	VB_NR_KNOBS,
};

struct vb_hint_settings {
	unsigned int enabled;
	/* requested mode: enum vb_hint_mode, AUTO included */
	unsigned int mode;
	/* smallest order scan reports */
	unsigned int min_order;
	/* smallest order alloc takes (default: the largest, as mainline) */
	unsigned int alloc_min_order;
	unsigned int blocks_per_chain;
	unsigned int chains_per_kick;
	unsigned int reserve_kb;
	/* alloc: most block memory (KiB) in flight, not yet used by the device */
	unsigned int alloc_max_inflight_kb;
	/* scan: most pages taken from one CPU's per-CPU lists of a zone */
	unsigned int pcp_max_pages;
};

/* Counters of the hint engine, protected by vb_hint.lock */
struct vb_hint_stats {
	u64 rounds;
	u64 blocks_hinted;
	u64 ranges_hinted;
	u64 bytes_hinted;
	u64 round_blocks;
	u64 round_bytes;
	u64 blocks_by_order[VB_HINT_NR_ORDERS];
	u64 blocks_returned_early;
	u64 ring_full_waits;
	/* alloc: waits for the device because alloc_max_inflight_kb was reached */
	u64 inflight_waits;
	/* STOP ids that could not be queued at once and were sent again */
	u64 stop_retries;
	u64 last_round_ns;
	/* CPU time the worker spent in the last round and in all rounds */
	u64 last_round_cpu_ns;
	u64 rounds_cpu_ns;
	/* scan: PFNs the last round walked, and the time it took */
	u64 round_pfns;
	u64 round_scan_ns;
	/* scan: longest zone->lock hold (IRQs off), last round and ever */
	u64 round_max_hold_ns;
	u64 max_hold_ns;
	/*
	 * scan: pages the last round took from per-CPU free lists (counted in
	 * round_pfns too), and the longest hold of a per-CPU list lock
	 * (preemption off) ever
	 */
	u64 round_pcp_pfns;
	u64 max_pcp_hold_ns;
	/* rounds ended because they waited too long for the device */
	u64 rounds_timed_out;
	u32 cmd_id;
};

/*
 * One descriptor chain on the free page vq, used as the virtqueue token.
 * A command chain carries @cmd (an outbuf) and possibly blocks; a hint chain
 * carries @nr_blocks blocks (inbufs) linked through page->lru on @blocks.
 * The buddy order of a block is kept in page_private() of its first page.
 */
struct vb_hint_chain {
	struct list_head node;
	struct list_head blocks;
	unsigned long nr_pages;
	unsigned int nr_blocks;
	__virtio32 cmd;
};

/* @nr pages from @pfn */
struct vb_mm_range {
	unsigned long pfn;
	unsigned long nr;
};

struct vb_mm_staged;

/*
 * A walk of every free list, as mm could offer it (vb_mm_walk()).  The
 * caller sets the first five; the walk fills the counters, which cover
 * one call.  @range is called with no lock held for each range of free
 * pages a hold found, blocks of @order; non-zero ends the walk and is
 * returned.  @stop,
 * when set, is asked before every hold; true ends the walk with -EINTR.
 * @start is the (order, node, zone) group a walk starts at; a walk that
 * ended there sets it to the group it ended in, one that got through
 * every group (to the per-CPU lists) sets it to 0.
 */
struct vb_mm_walk {
	unsigned int min_order;
	unsigned long pcp_max_pages;
	unsigned int start;
	int (*range)(struct vb_mm_walk *w, const struct vb_mm_range *r,
		     unsigned int order);
	bool (*stop)(struct vb_mm_walk *w);
	/* pages taken from the buddy and the per-CPU free lists */
	u64 pfns;
	u64 pcp_pfns;
	/* holds of zone->lock: count, time, longest, by duration */
	u64 holds;
	u64 hold_ns;
	u64 max_hold_ns;
	/* [i] counts holds of [2^i, 2^(i+1)) us, [0] < 2 us */
	u32 hold_hist[VB_MM_HOLD_HIST];
	/* holds of a per-CPU list lock: count, longest */
	u64 pcp_holds;
	u64 pcp_max_hold_ns;
#ifdef VB_FAULT_INJECT
	/*
	 * Test build: pages the walk passed by on MIGRATE_ISOLATE's lists
	 * (the first 64 blocks of each), and pages it took from isolated
	 * pageblocks
	 */
	u64 isolated_free;
	u64 isolated_taken;
#endif
	/* the walk's own: the ranges of one hold (VB_MM_STAGE_RANGES) */
	struct vb_mm_staged *stage;
	unsigned int nr_staged;
};

struct vb_scan_walk;

/*
 * Scan mode state (worker only).  The walk of mm's free lists (@walk)
 * hands out ranges of free pages; they wait in r[] (a range touching the
 * last one extends it) until a chain is queued; pend_by_order counts
 * their blocks per order.  @chains counts the chains queued since the
 * last kick; @tally, in the test build's walk, takes the ranges instead
 * of a chain.
 */
struct vb_scan_state {
	struct vb_mm_walk walk;
	struct vb_mm_range r[VB_HINT_MAX_BPC];
	unsigned int n;
	unsigned int max;
	u64 pend_by_order[VB_HINT_NR_ORDERS];
	unsigned int chains;
	struct vb_scan_walk *tally;
};

struct vb_hint {
	/* freezable workqueue running vb_hint_work_fn */
	struct workqueue_struct *wq;
	struct work_struct work;
	/* serializes every use of the free page vq (worker, shrinker) */
	struct mutex vq_lock;
	/* the free page vq; NULL while the queues are torn down */
	struct virtqueue *vq;
	unsigned int ring_size;
	/* protects inflight, acked, the page counts and stats */
	spinlock_t lock;
	/* chains the device has not returned yet */
	struct list_head inflight;
	/* blocks the device has returned: safe to give back to mm */
	struct list_head acked;
	unsigned long inflight_pages;
	unsigned long acked_pages;
	/* woken by the vq callback, config changes and stop */
	wait_queue_head_t wait;
	unsigned long flags;
	/* last command id read from config space (worker only) */
	u32 cmd_id_received;
	/* command id of the current/last round (worker only) */
	u32 cmd_id_active;
	/* a previously used id, for the stale_id fault */
	u32 cmd_id_previous;
	/* settings of the running round, and its mode (SCAN or ALLOC) */
	struct vb_hint_settings cur;
	unsigned int cur_mode;
	struct vb_compat_shrinker shrinker;
	bool shrinker_registered;
	/* scratch scatterlist of the worker (under vq_lock) */
	struct scatterlist sg[VB_HINT_MAX_BPC];
	struct vb_scan_state scan;
	struct vb_hint_stats stats;
};

/* A failure point of the test build (vb_fault.c) */
struct vb_fault_point {
#ifdef CONFIG_FAULT_INJECTION_DEBUG_FS
	struct fault_attr attr;
#else
	u32 probability;
	atomic_t times;
#endif
};

struct vb_fault_state {
	/* bitmap of enum vb_fault pending for the next round */
	unsigned long pending;
	/* number of injected faults per kind */
	atomic64_t injected[VB_FAULT_NR];
	struct vb_fault_point fail_restore;
	struct vb_fault_point fail_stop;
	/*
	 * hinted_pfns: what scan rounds queued since it was written
	 * (vq_lock); both bitmaps cover pfns 0 .. @rec_pfns - 1
	 */
	unsigned long *hinted;
	unsigned long rec_pfns;
	unsigned long hinted_beyond;
	/* stayed_free: pages free in every sample since the record began */
	struct mutex stay_lock;
	unsigned long *stay;
	unsigned int stay_samples;
};

struct vb_device {
	struct virtio_device *vdev;
	struct virtqueue *inflate_vq;
	struct virtqueue *deflate_vq;
	struct virtqueue *stats_vq;
	struct virtqueue *report_vq;

	/* protects stop_update; taken in the config-change interrupt */
	spinlock_t stop_update_lock;
	bool stop_update;
	struct work_struct size_work;
	struct work_struct stats_work;

	/* inflate/deflate: balloon_lock protects num_pages and pfns */
	struct mutex balloon_lock;
	/* host acked an inflate/deflate/report buffer */
	wait_queue_head_t acked;
	unsigned int num_pages;
	struct balloon_dev_info bdev_info;
	unsigned int num_pfns;
	__virtio32 pfns[VB_PFNS_MAX];
	struct vb_wire_stat stats[VIRTIO_BALLOON_S_NR];
	struct notifier_block oom_nb;
	bool oom_registered;

	/* free page reporting */
	struct page_reporting_dev_info pr_dev_info;
	bool pr_registered;

	/* free page hinting */
	struct vb_hint hint;

	/* settings (vb_core.c): settings_lock protects them */
	struct mutex settings_lock;
	struct vb_hint_settings settings;

	/*
	 * Wakeup events (vb_core.c): work queued by an interrupt that system
	 * sleep must wait for.  wake_lock protects both; wake_pending holds
	 * the VB_WAKE_* bits not yet picked up by their work.
	 */
	spinlock_t wake_lock;
	unsigned int wake_pending;
	bool wake_held;

	/* debugfs directory of this device (vb_debugfs.c), or an error */
	struct dentry *debugfs_dir;

	/* ends hint rounds before the freezer runs */
	struct notifier_block pm_nb;
	bool pm_registered;

	struct vb_fault_state fault;
};

/* vb_core.c: settings and the mode rule */
void vb_core_default_settings(struct vb_hint_settings *s);
void vb_core_settings_load(struct vb_device *vb, struct vb_hint_settings *out);
unsigned int vb_core_settings_get(const struct vb_hint_settings *s,
				  enum vb_knob knob);
void vb_core_settings_set(struct vb_device *vb, enum vb_knob knob,
			  unsigned int val);
const char *vb_core_scan_refusal(struct vb_device *vb);
unsigned int vb_core_hint_mode(struct vb_device *vb, unsigned int requested);

/* vb_core.c: wakeup events of the config and stats interrupts */
#define VB_WAKE_SIZE	BIT(0)
#define VB_WAKE_STATS	BIT(1)
void vb_core_wake_begin(struct vb_device *vb, unsigned int event);
void vb_core_wake_taken(struct vb_device *vb, unsigned int event);
void vb_core_wake_end(struct vb_device *vb);

static inline bool vb_has(const struct vb_device *vb, unsigned int fbit)
{
	return virtio_has_feature(vb->vdev, fbit);
}

/* vb_inflate.c */
void vb_inflate_init(struct vb_device *vb);
void vb_inflate_ack(struct virtqueue *vq);
void vb_inflate_size_work_fn(struct work_struct *work);
void vb_inflate_update_actual(struct vb_device *vb);
s64 vb_inflate_towards_target(struct vb_device *vb);
void vb_inflate_release_all(struct vb_device *vb);
void vb_stats_request(struct virtqueue *vq);
void vb_stats_work_fn(struct work_struct *work);
int vb_stats_prime(struct vb_device *vb);
int vb_oom_register(struct vb_device *vb);
void vb_oom_unregister(struct vb_device *vb);

/* vb_hint.c: the round engine, used by vb_core.c */
int vb_hint_init(struct vb_device *vb);
void vb_hint_exit(struct vb_device *vb);
void vb_hint_attach_vq(struct vb_device *vb, struct virtqueue *vq);
void vb_hint_vq_done(struct virtqueue *vq);
void vb_hint_config_changed(struct vb_device *vb);
void vb_hint_pm_pause(struct vb_device *vb, bool pause);
void vb_hint_quiesce(struct vb_device *vb);
void vb_hint_release_after_reset(struct vb_device *vb);
void vb_hint_resume(struct vb_device *vb);
void vb_hint_stats_snapshot(struct vb_device *vb, struct vb_hint_stats *out);

/* vb_hint.c: used by the searches and the fault injection */
struct vb_hint_chain *vb_hint_chain_alloc(void);
void vb_hint_chain_add_block(struct vb_hint_chain *c, struct page *page);
unsigned int vb_hint_block_order(struct page *page);
void vb_hint_block_list_free(struct list_head *list);
bool vb_hint_round_must_stop(struct vb_device *vb);
bool vb_hint_wait_room(struct vb_device *vb, unsigned int need,
		       unsigned long max_inflight, bool in_round);
int vb_hint_queue(struct vb_device *vb, struct vb_hint_chain *c,
		  struct scatterlist *sgs[], unsigned int out, unsigned int in);
void vb_hint_count_chain(struct vb_hint *h, unsigned int ranges, u64 bytes,
			 const u64 *by_order);
void vb_hint_chain_queued(struct vb_hint *h, unsigned int *chains);
bool vb_hint_drain(struct vb_device *vb, unsigned int ms, bool stop_on_cmd,
		   u32 id);
#define VB_HINT_CMD_WAIT_MS	1000

/*
 * vb_mm.c: the one place that reads mm's free lists.  A hold of a lock
 * that keeps them still runs inside the offline fence (vb_mm_hold_begin()).
 */
struct vb_mm_hold {
	bool fenced;
	unsigned long gen;
};

int vb_mm_init(void);
void vb_mm_exit(void);
void vb_mm_check(void);
const char *vb_mm_scan_refusal(void);
bool vb_mm_hold_begin(struct vb_mm_hold *h);
void vb_mm_hold_end(struct vb_mm_hold *h);
unsigned long vb_mm_zone_unusable_free(struct zone *zone);
#if defined(VB_FAULT_INJECT) && defined(CONFIG_SPARSEMEM)
unsigned int vb_mm_pageblock_migratetype(unsigned long pfn);
#endif

int vb_mm_walk_init(struct vb_mm_walk *w);
void vb_mm_walk_destroy(struct vb_mm_walk *w);
int vb_mm_walk(struct vb_mm_walk *w);
bool vb_mm_range_extend(struct vb_mm_range *r, unsigned long pfn,
			unsigned long nr);
int vb_mm_range_cmp(const void *a, const void *b);

/* vb_scan.c, vb_alloc.c: one round of each search */
int vb_scan_round(struct vb_device *vb);
int vb_scan_init(struct vb_device *vb);
void vb_scan_exit(struct vb_device *vb);
int vb_alloc_round(struct vb_device *vb);

/* vb_fault.c: fault injection, built only with VB_FAULT_INJECT=y */
#ifdef VB_FAULT_INJECT
/* what a walk of all free lists by the scan search cost (debugfs scan_walk) */
struct vb_scan_walk {
	u64 pfns;
	u64 ns;
	u64 max_hold_ns;
	u64 ranges;
	u64 free_pages;
	u64 holds;
	u64 hold_ns;
	u32 hold_hist[VB_MM_HOLD_HIST];
	u64 pcp_pfns;
	u64 pcp_max_hold_ns;
	u64 pcp_holds;
	u64 isolated_free;
	u64 isolated_taken;
};

void vb_scan_walk(struct vb_device *vb, struct vb_scan_walk *w);
void vb_fault_init(struct vb_device *vb);
void vb_fault_exit(struct vb_device *vb);
void vb_fault_inject_round(struct vb_device *vb);
void vb_fault_note_hinted(struct vb_device *vb, unsigned long pfn,
			  unsigned long nr);
bool vb_fault_fail_restore(struct vb_device *vb);
bool vb_fault_fail_stop(struct vb_device *vb);
unsigned long vb_fault_self_check_skew(unsigned int order);
bool vb_fault_no_offline_fence(void);
bool vb_fault_walk_isolated(void);
bool vb_fault_walk_delay(struct zone *zone, struct per_cpu_pages *pcp,
			 unsigned int cpu);
#else
static inline void vb_fault_init(struct vb_device *vb) { }
static inline void vb_fault_exit(struct vb_device *vb) { }
static inline void vb_fault_inject_round(struct vb_device *vb) { }
static inline void vb_fault_note_hinted(struct vb_device *vb,
					unsigned long pfn, unsigned long nr) { }
static inline bool vb_fault_fail_restore(struct vb_device *vb)
{
	return false;
}

static inline bool vb_fault_fail_stop(struct vb_device *vb)
{
	return false;
}

static inline unsigned long vb_fault_self_check_skew(unsigned int order)
{
	return 0;
}

static inline bool vb_fault_no_offline_fence(void)
{
	return false;
}

static inline bool vb_fault_walk_isolated(void)
{
	return false;
}

static inline bool vb_fault_walk_delay(struct zone *zone,
				       struct per_cpu_pages *pcp,
				       unsigned int cpu)
{
	return false;
}
#endif

/* vb_report.c */
void vb_report_validate(struct virtio_device *vdev);
void vb_report_write_poison(struct vb_device *vb);
int vb_report_register(struct vb_device *vb);
void vb_report_unregister(struct vb_device *vb);

/* vb_sysfs.c */
extern const struct attribute_group *vb_sysfs_groups[];
int vb_sysfs_validate(const struct vb_hint_settings *s, struct vb_device *vb);
int vb_sysfs_parse_mode(const char *str);

/* vb_debugfs.c */
void vb_debugfs_init(struct vb_device *vb);
void vb_debugfs_exit(struct vb_device *vb);
void vb_debugfs_module_init(void);
void vb_debugfs_module_exit(void);

#endif /* VB_H */
