/* SPDX-License-Identifier: GPL-2.0 */
/*
 * vb.h - internal state and prototypes of the virtio_balloon module.
 *
 * See the design comment at the top of vb_core.c for the modes and units.
 * One struct vb_device exists per virtio balloon device; every function is
 * prefixed by its concern: vb_core_, vb_inflate_, vb_stats_, vb_oom_,
 * vb_hint_, vb_report_, vb_sysfs_, vb_fault_.
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
#include <linux/balloon_compaction.h>
#include <linux/page_reporting.h>

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
/* Scan mode: PFNs examined per hold of zone->lock, largest merged range */
#define VB_HINT_SCAN_PFNS_PER_LOCK	1024UL
#define VB_HINT_SCAN_MAX_RANGE		(1UL << (30 - PAGE_SHIFT))
/* Upper bounds of the batching knobs */
#define VB_HINT_MAX_BPC		64
#define VB_HINT_MAX_CPK		256

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
};

/* Fault kinds for the host tests (debugfs inject_bad_hints) */
enum vb_fault {
	VB_FAULT_ZERO_LEN,
	VB_FAULT_OUT_OF_RAM,
	VB_FAULT_STALE_ID,
	VB_FAULT_MISALIGNED,
	VB_FAULT_OVERSIZED_CHAIN,
	VB_FAULT_SHORT_CMD,
	VB_FAULT_NR,
};

/*
 * How a round finds free memory (see the design comment in vb_hint.c):
 * scan reports free buddy blocks where they are, alloc takes them from the
 * allocator and holds them until DONE.
 */
enum vb_hint_mode {
	VB_HINT_MODE_SCAN,
	VB_HINT_MODE_ALLOC,
	VB_HINT_NR_MODES,
};

/* Knobs of the hint engine; validated on write, copied at round start */
struct vb_hint_settings {
	unsigned int enabled;
	unsigned int mode;
	unsigned int min_order;
	unsigned int blocks_per_chain;
	unsigned int chains_per_kick;
	unsigned int reserve_kb;
	unsigned int drop_cache;
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
	u64 last_round_ns;
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

/*
 * Scan mode state of the running round (worker only).  Free blocks found
 * next to each other are merged into the open range; closed ranges wait in
 * r_pfn/r_nr until a chain is queued.  Blocks are counted per order:
 * open_by_order for the open range, pend_by_order for the closed ranges.
 */
struct vb_hint_scan {
	unsigned long start;
	unsigned long nr;
	unsigned long r_pfn[VB_HINT_MAX_BPC];
	unsigned long r_nr[VB_HINT_MAX_BPC];
	unsigned int n;
	unsigned int max;
	u64 open_by_order[VB_HINT_NR_ORDERS];
	u64 pend_by_order[VB_HINT_NR_ORDERS];
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
	/* settings of the running round */
	struct vb_hint_settings cur;
	struct vb_compat_shrinker shrinker;
	bool shrinker_registered;
	/* scratch scatterlist of the worker (under vq_lock) */
	struct scatterlist sg[VB_HINT_MAX_BPC];
	struct vb_hint_scan scan;
	struct vb_hint_stats stats;
};

struct vb_fault_state {
	/* debugfs directory of this device, NULL if fault_inject=0 */
	struct dentry *dir;
	/* bitmap of enum vb_fault pending for the next round */
	unsigned long pending;
	/* number of injected faults per kind */
	atomic64_t injected[VB_FAULT_NR];
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

	/* sysfs knobs: settings_lock protects settings */
	struct mutex settings_lock;
	struct vb_hint_settings settings;
	bool sysfs_registered;

	struct vb_fault_state fault;
};

/* module parameters (vb_core.c) */
extern bool vb_param_fault_inject;
void vb_core_default_settings(struct vb_hint_settings *s);

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

/* vb_hint.c */
bool vb_hint_mode_allowed(struct vb_device *vb, unsigned int mode);
int vb_hint_init(struct vb_device *vb);
void vb_hint_exit(struct vb_device *vb);
void vb_hint_attach_vq(struct vb_device *vb, struct virtqueue *vq);
void vb_hint_vq_done(struct virtqueue *vq);
void vb_hint_config_changed(struct vb_device *vb);
void vb_hint_quiesce(struct vb_device *vb);
void vb_hint_release_after_reset(struct vb_device *vb);
void vb_hint_resume(struct vb_device *vb);
void vb_hint_stats_snapshot(struct vb_device *vb, struct vb_hint_stats *out);
int vb_fault_init(struct vb_device *vb);
void vb_fault_exit(struct vb_device *vb);
void vb_fault_module_init(void);
void vb_fault_module_exit(void);

/* vb_report.c */
void vb_report_validate(struct virtio_device *vdev);
void vb_report_write_poison(struct vb_device *vb);
int vb_report_register(struct vb_device *vb);
void vb_report_unregister(struct vb_device *vb);

/* vb_sysfs.c */
int vb_sysfs_init(struct vb_device *vb);
void vb_sysfs_exit(struct vb_device *vb);
void vb_sysfs_snapshot(struct vb_device *vb, struct vb_hint_settings *out);
int vb_sysfs_validate(const struct vb_hint_settings *s, struct vb_device *vb);
int vb_sysfs_parse_mode(const char *str);

#endif /* VB_H */
