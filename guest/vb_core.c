// SPDX-License-Identifier: GPL-2.0
/*
 * virtio_balloon - out-of-tree virtio balloon driver with better free page
 * hinting.  Replaces the in-tree drivers/virtio/virtio_balloon.c (6.1).
 *
 * Modes
 * -----
 * The device offers up to six features; each one enables an independent
 * mode of the driver:
 *
 *  - inflate/deflate (always): the host sets config.num_pages, we allocate
 *    (inflate) or free (deflate) guest pages and tell the host their PFNs
 *    on the inflate/deflate queues.  Ballooned pages are movable through
 *    balloon compaction (vb_inflate.c).  With MUST_TELL_HOST the host is
 *    told before a deflated page is reused (we always do that anyway).
 *  - STATS_VQ: the host asks for memory statistics; we answer with the
 *    same ten tags as Linux 6.1.
 *  - DEFLATE_ON_OOM: an OOM notifier deflates 256 balloon pages per call;
 *    without it, ballooned pages are removed from the managed page count.
 *  - FREE_PAGE_HINT: during migration the host asks for free memory by
 *    writing a command id; we tell it which guest memory is free
 *    (vb_hint.c, the round engine).  Two searches: "alloc" (vb_alloc.c)
 *    takes free blocks from the allocator, with the in-tree driver's flags
 *    (never movable memory) and above every zone's high watermark, and
 *    holds them until the host says DONE; it is safe on every device.
 *    "scan" (vb_scan.c) reports the buddy allocator's free blocks where
 *    they are, merged into ranges, without taking them: nothing is
 *    allocated, zeroed or held.  Scan is safe only when the device keeps
 *    every write made after it issued the command id, which it promises by
 *    offering HINT_KEEP_WRITES (bit 16, a balloon-hint extension).  The
 *    mode rule (vb_core_hint_mode()): "auto" (the default) is scan when
 *    HINT_KEEP_WRITES was negotiated, the ring does not go through the DMA
 *    API (a bounce buffer copied back over a reused page would corrupt it)
 *    and free pages have no content the guest relies on (page poisoning,
 *    init_on_free), and the kernel is one scan was validated on whose free
 *    lists pass the module's self-check (vb_mm.c); otherwise alloc.
 *    Asking for scan where it is not safe fails with -EINVAL, and
 *    free_page_hint/scan_refusal says why.
 *  - PAGE_POISON / REPORTING: free page reporting through mm/page_reporting
 *    with the in-tree page-poison rules (vb_report.c).
 *
 * Units
 * -----
 *  - balloon pages: 4 KiB (VIRTIO_BALLOON_PFN_SHIFT), used by num_pages,
 *    actual and the PFN arrays.  A guest page is VB_PAGES_PER_PAGE balloon
 *    pages; every counter of the inflate code is in balloon pages.
 *  - hint blocks: 2^order guest pages, order in [min_order, MAX_ORDER - 1]
 *    (buddy order, 10 = 4 MiB on x86-64).  A hint range (one descriptor)
 *    is one block (alloc) or adjacent free blocks merged, up to 1 GiB
 *    (scan).  Hint counters count blocks, ranges and bytes; reserve_kb is
 *    in KiB.
 *  - command ids: 32-bit, host-issued ids are >= 0x80000000; 0 = STOP,
 *    1 = DONE.
 *
 * Virtqueues are created in the fixed order inflate, deflate, stats,
 * free_page_vq, reporting_vq; a queue whose feature was not negotiated
 * gets a NULL name and takes no index, so the indices are compacted (the
 * hint queue is index 2 without STATS_VQ, 3 with it).
 *
 * Settings: the hint settings of a device (struct vb_hint_settings) are
 * owned here.  Module parameters give their defaults; sysfs validates a
 * knob and stores it with vb_core_settings_set(); a round copies them
 * with vb_core_settings_load() when it starts.  The sysfs group is one of
 * the driver's dev_groups (vb_sysfs.c).
 *
 * Sleep: freeze resets the device and deletes the queues; restore builds
 * them again.  A restore that fails leaves no queue pointer behind, so a
 * later freeze, restore or remove finds a device with no queues.  A PM
 * notifier ends hint rounds before the freezer runs.  A new balloon target
 * or stats request holds the device's wakeup source until its work ran.
 *
 * Locking: balloon_lock for inflate/deflate, stop_update_lock against the
 * config interrupt, hint.vq_lock serializes the free page vq, hint.lock
 * (spinlock, never held while allocating) protects hint block lists and
 * counters, settings_lock protects the settings.
 *
 * Module parameters (defaults of every device's settings, see
 * Documentation/guest-driver.md): hint_enabled, hint_mode (auto, scan,
 * alloc), hint_min_order (scan), hint_alloc_min_order (alloc),
 * hint_blocks_per_chain, hint_chains_per_kick, hint_reserve_kb,
 * hint_alloc_max_inflight_kb (alloc), hint_pcp_max_pages (scan);
 * fault_inject in test builds only
 * (vb_fault.c).
 */

#include <linux/module.h>
#include <linux/slab.h>
#include <linux/mm.h>
#include <linux/virtio.h>
#include <linux/virtio_config.h>
#include <linux/suspend.h>
#include <linux/mm.h>
#include <xen/xen.h>
#include <uapi/linux/virtio_ring.h>

#include "vb.h"

/* Module parameters: defaults of the per-device hint settings */
static bool hint_enabled = true;
module_param(hint_enabled, bool, 0444);
MODULE_PARM_DESC(hint_enabled, "Answer free page hint requests (default: 1)");

static char *hint_mode = "auto";
module_param(hint_mode, charp, 0444);
MODULE_PARM_DESC(hint_mode,
		 "How free memory is found: scan, alloc, or auto = scan when the device keeps writes made after the command id (HINT_KEEP_WRITES), else alloc (default: auto)");

static uint hint_min_order;
module_param(hint_min_order, uint, 0444);
MODULE_PARM_DESC(hint_min_order,
		 "Smallest buddy order scan reports, 0..MAX_ORDER-1 (default: 0)");

static uint hint_alloc_min_order = VB_HINT_MAX_ORDER;
module_param(hint_alloc_min_order, uint, 0444);
MODULE_PARM_DESC(hint_alloc_min_order,
		 "Smallest buddy order alloc takes, 0..MAX_ORDER-1 (default: MAX_ORDER-1, as the in-tree driver)");

static uint hint_blocks_per_chain = 16;
module_param(hint_blocks_per_chain, uint, 0444);
MODULE_PARM_DESC(hint_blocks_per_chain,
		 "Free blocks per descriptor chain, 1..64 (default: 16)");

static uint hint_chains_per_kick = 8;
module_param(hint_chains_per_kick, uint, 0444);
MODULE_PARM_DESC(hint_chains_per_kick,
		 "Descriptor chains queued per notification, 1..256 (default: 8)");

static uint hint_reserve_kb = 65536;
module_param(hint_reserve_kb, uint, 0444);
MODULE_PARM_DESC(hint_reserve_kb,
		 "Alloc mode: free memory (KiB) kept in every zone above its high watermark (default: 65536)");

static uint hint_alloc_max_inflight_kb = VB_ALLOC_INFLIGHT_KB;
module_param(hint_alloc_max_inflight_kb, uint, 0444);
MODULE_PARM_DESC(hint_alloc_max_inflight_kb,
		 "Alloc mode: most block memory (KiB) in flight, not yet used by the device, >= one block of the largest order (default: 262144)");

static uint hint_pcp_max_pages = VB_SCAN_PCP_PAGES;
module_param(hint_pcp_max_pages, uint, 0444);
MODULE_PARM_DESC(hint_pcp_max_pages,
		 "Scan mode: most pages a round takes from the per-CPU free lists of one CPU in one zone, 0..1048576, 0 = none (default: 131072)");

static struct vb_hint_settings vb_core_defaults;

void vb_core_default_settings(struct vb_hint_settings *s)
{
	*s = vb_core_defaults;
}

/* A consistent copy of the settings of @vb */
void vb_core_settings_load(struct vb_device *vb, struct vb_hint_settings *out)
{
	mutex_lock(&vb->settings_lock);
	*out = vb->settings;
	mutex_unlock(&vb->settings_lock);
}

/* The member of @s that @knob names */
static unsigned int *vb_core_knob(struct vb_hint_settings *s,
				  enum vb_knob knob)
{
	switch (knob) {
	case VB_KNOB_ENABLED:
		return &s->enabled;
	case VB_KNOB_MODE:
		return &s->mode;
	case VB_KNOB_MIN_ORDER:
		return &s->min_order;
	case VB_KNOB_ALLOC_MIN_ORDER:
		return &s->alloc_min_order;
	case VB_KNOB_BLOCKS_PER_CHAIN:
		return &s->blocks_per_chain;
	case VB_KNOB_CHAINS_PER_KICK:
		return &s->chains_per_kick;
	case VB_KNOB_RESERVE_KB:
		return &s->reserve_kb;
	case VB_KNOB_ALLOC_MAX_INFLIGHT_KB:
		return &s->alloc_max_inflight_kb;
	case VB_KNOB_PCP_MAX_PAGES:
		return &s->pcp_max_pages;
	default:
		return NULL;
	}
}

unsigned int vb_core_settings_get(const struct vb_hint_settings *s,
				  enum vb_knob knob)
{
	struct vb_hint_settings copy = *s;
	unsigned int *val = vb_core_knob(&copy, knob);

	return val ? *val : 0;
}

/* Store a value sysfs validated for @knob */
void vb_core_settings_set(struct vb_device *vb, enum vb_knob knob,
			  unsigned int val)
{
	unsigned int *p;

	mutex_lock(&vb->settings_lock);
	p = vb_core_knob(&vb->settings, knob);
	if (!WARN_ON(!p))
		*p = val;
	mutex_unlock(&vb->settings_lock);
}

/*
 * Wakeup events.  The config interrupt (new balloon target) and the stats
 * request queue work on a freezable workqueue; until that work has run,
 * system sleep must wait, or the host's request would sit unanswered for
 * the whole sleep.  The device holds its wakeup source from the interrupt
 * until every event taken meanwhile was handled.  The balloon cannot wake
 * the system itself: the transport forwards wakeups, so the device is
 * marked wakeup capable and user space decides (power/wakeup).
 */
void vb_core_wake_begin(struct vb_device *vb, unsigned int event)
{
	unsigned long flags;

	spin_lock_irqsave(&vb->wake_lock, flags);
	vb->wake_pending |= event;
	if (!vb->wake_held) {
		vb->wake_held = true;
		pm_stay_awake(&vb->vdev->dev);
	}
	spin_unlock_irqrestore(&vb->wake_lock, flags);
}

/* The work of @event runs: a later interrupt must hold the source again */
void vb_core_wake_taken(struct vb_device *vb, unsigned int event)
{
	spin_lock_irq(&vb->wake_lock);
	vb->wake_pending &= ~event;
	spin_unlock_irq(&vb->wake_lock);
}

/* A work item finished: relax once no event is left to handle */
void vb_core_wake_end(struct vb_device *vb)
{
	spin_lock_irq(&vb->wake_lock);
	if (vb->wake_held && !vb->wake_pending) {
		vb->wake_held = false;
		pm_relax(&vb->vdev->dev);
	}
	spin_unlock_irq(&vb->wake_lock);
}

/* Drop the source whatever is pending: the work was cancelled */
static void vb_core_wake_cancel(struct vb_device *vb)
{
	spin_lock_irq(&vb->wake_lock);
	vb->wake_pending = 0;
	spin_unlock_irq(&vb->wake_lock);
	vb_core_wake_end(vb);
}

/*
 * Does the ring go through the DMA API?  Then a device-writable buffer may
 * be a bounce buffer that is copied back over the hinted memory when it is
 * unmapped, long after the guest reused it.  Mirrors vring_use_dma_api():
 * always with ACCESS_PLATFORM, and under Xen whatever was negotiated.
 */
static bool vb_core_ring_uses_dma_api(struct virtio_device *vdev)
{
	return !virtio_has_dma_quirk(vdev) || xen_domain();
}

/*
 * Why scan must not be used, or NULL when it may.  @vb NULL: the rules that
 * hold before any device (the guest's own page content rules).
 */
const char *vb_core_scan_refusal(struct vb_device *vb)
{
	if (page_poisoning_enabled_static())
		return "free pages are poisoned (page_poison=1)";
	if (want_init_on_free())
		return "free pages are zeroed (init_on_free=1)";
	if (!vb)
		return NULL;
	if (!vb_has(vb, VIRTIO_BALLOON_F_FREE_PAGE_HINT))
		return "the device does not offer free page hinting";
	if (!vb_has(vb, VIRTIO_BALLOON_F_HINT_KEEP_WRITES))
		return "the device does not offer HINT_KEEP_WRITES (bit 16)";
	if (vb_core_ring_uses_dma_api(vb->vdev))
		return "the free page vq goes through the DMA API (bounce buffers)";
	/* this kernel's lists: listed and self-checked (vb_mm.c) */
	return vb_mm_scan_refusal();
}

/* The mode a round of @vb uses for the requested mode (AUTO resolved) */
unsigned int vb_core_hint_mode(struct vb_device *vb, unsigned int requested)
{
	if (requested == VB_HINT_MODE_ALLOC || vb_core_scan_refusal(vb))
		return VB_HINT_MODE_ALLOC;
	return VB_HINT_MODE_SCAN;
}

static int vb_core_check_params(void)
{
	struct vb_hint_settings s = {
		.enabled = hint_enabled,
		.mode = vb_sysfs_parse_mode(hint_mode),
		.min_order = hint_min_order,
		.alloc_min_order = hint_alloc_min_order,
		.blocks_per_chain = hint_blocks_per_chain,
		.chains_per_kick = hint_chains_per_kick,
		.reserve_kb = hint_reserve_kb,
		.alloc_max_inflight_kb = hint_alloc_max_inflight_kb,
		.pcp_max_pages = hint_pcp_max_pages,
	};

	if (vb_sysfs_validate(&s, NULL)) {
		pr_err("virtio_balloon: invalid hint_* module parameter\n");
		return -EINVAL;
	}
	vb_core_defaults = s;
	return 0;
}

static void vb_core_config_changed(struct virtio_device *vdev)
{
	struct vb_device *vb = vdev->priv;
	unsigned long flags;

	spin_lock_irqsave(&vb->stop_update_lock, flags);
	if (!vb->stop_update) {
		vb_core_wake_begin(vb, VB_WAKE_SIZE);
		queue_work(system_freezable_wq, &vb->size_work);
		vb_hint_config_changed(vb);
	}
	spin_unlock_irqrestore(&vb->stop_update_lock, flags);
}

/* Delete the queues and forget every pointer to them */
static void vb_core_del_vqs(struct vb_device *vb)
{
	vb_hint_attach_vq(vb, NULL);
	vb->vdev->config->del_vqs(vb->vdev);
	vb->inflate_vq = NULL;
	vb->deflate_vq = NULL;
	vb->stats_vq = NULL;
	vb->report_vq = NULL;
}

static int vb_core_init_vqs(struct vb_device *vb)
{
	struct virtqueue *vqs[VB_WIRE_VQ_MAX];
	vq_callback_t *callbacks[VB_WIRE_VQ_MAX] = {};
	const char *names[VB_WIRE_VQ_MAX] = {};
	int err;

	callbacks[VB_WIRE_VQ_INFLATE] = vb_inflate_ack;
	names[VB_WIRE_VQ_INFLATE] = VB_WIRE_VQ_NAME_INFLATE;
	callbacks[VB_WIRE_VQ_DEFLATE] = vb_inflate_ack;
	names[VB_WIRE_VQ_DEFLATE] = VB_WIRE_VQ_NAME_DEFLATE;
	if (vb_has(vb, VIRTIO_BALLOON_F_STATS_VQ)) {
		callbacks[VB_WIRE_VQ_STATS] = vb_stats_request;
		names[VB_WIRE_VQ_STATS] = VB_WIRE_VQ_NAME_STATS;
	}
	if (vb_has(vb, VIRTIO_BALLOON_F_FREE_PAGE_HINT)) {
		callbacks[VB_WIRE_VQ_FREE_PAGE] = vb_hint_vq_done;
		names[VB_WIRE_VQ_FREE_PAGE] = VB_WIRE_VQ_NAME_FREE_PAGE;
	}
	if (vb_has(vb, VIRTIO_BALLOON_F_REPORTING)) {
		callbacks[VB_WIRE_VQ_REPORTING] = vb_inflate_ack;
		names[VB_WIRE_VQ_REPORTING] = VB_WIRE_VQ_NAME_REPORTING;
	}

	/* NULL names take no queue index: the indices are compacted */
	err = vb_compat_find_vqs(vb->vdev, VB_WIRE_VQ_MAX, vqs, callbacks,
				 names);
	if (err)
		return err;

	vb->inflate_vq = vqs[VB_WIRE_VQ_INFLATE];
	vb->deflate_vq = vqs[VB_WIRE_VQ_DEFLATE];
	vb->stats_vq = names[VB_WIRE_VQ_STATS] ? vqs[VB_WIRE_VQ_STATS] : NULL;
	vb->report_vq = names[VB_WIRE_VQ_REPORTING] ?
			vqs[VB_WIRE_VQ_REPORTING] : NULL;
	vb_hint_attach_vq(vb, names[VB_WIRE_VQ_FREE_PAGE] ?
			  vqs[VB_WIRE_VQ_FREE_PAGE] : NULL);

	/* one free page vq slot is always reserved for the STOP id */
	if (names[VB_WIRE_VQ_FREE_PAGE] && vb->hint.ring_size < 2)
		err = -ENOSPC;
	if (!err && vb->stats_vq)
		err = vb_stats_prime(vb);
	if (err)
		vb_core_del_vqs(vb);
	return err;
}

static void vb_core_stop_updates(struct vb_device *vb, bool stop)
{
	spin_lock_irq(&vb->stop_update_lock);
	vb->stop_update = stop;
	spin_unlock_irq(&vb->stop_update_lock);
}

/*
 * Tear the device down to "no queues": give the balloon back, reset the
 * device (after which it touches no guest memory), release the hinted
 * blocks and delete the queues.  Hinting must already be quiesced.
 */
static void vb_core_teardown(struct vb_device *vb)
{
	/* a failed restore left no queues, but may have left a status */
	bool have_vqs = vb->inflate_vq;

	if (have_vqs) {
		vb_inflate_release_all(vb);
		vb_inflate_update_actual(vb);
	}

	virtio_reset_device(vb->vdev);
	/* the device returned or forgot every buffer: blocks are ours */
	vb_hint_release_after_reset(vb);
	if (have_vqs)
		vb_core_del_vqs(vb);
}

/*
 * Before the freezer runs, end a running hint round: a round waiting for
 * the device must not keep the freezable hint workqueue from freezing.
 * Restoring a hibernation image freezes tasks too (PM_RESTORE_PREPARE):
 * the kernel that loads the image ends its rounds the same way.
 */
static int vb_core_pm_notify(struct notifier_block *nb, unsigned long action,
			     void *unused)
{
	struct vb_device *vb = container_of(nb, struct vb_device, pm_nb);

	switch (action) {
	case PM_HIBERNATION_PREPARE:
	case PM_SUSPEND_PREPARE:
	case PM_RESTORE_PREPARE:
		vb_hint_pm_pause(vb, true);
		break;
	case PM_POST_HIBERNATION:
	case PM_POST_SUSPEND:
	case PM_POST_RESTORE:
		vb_hint_pm_pause(vb, false);
		break;
	}
	return NOTIFY_OK;
}

static int vb_core_pm_register(struct vb_device *vb)
{
	int err;

	if (!vb->hint.wq)
		return 0;
	vb->pm_nb.notifier_call = vb_core_pm_notify;
	err = register_pm_notifier(&vb->pm_nb);
	vb->pm_registered = !err;
	return err;
}

static void vb_core_pm_unregister(struct vb_device *vb)
{
	if (vb->pm_registered)
		unregister_pm_notifier(&vb->pm_nb);
	vb->pm_registered = false;
}

/* Settings of a new device: the module defaults, mode checked for it */
static void vb_core_init_settings(struct vb_device *vb)
{
	const char *why;

	vb_core_default_settings(&vb->settings);
	why = vb_core_scan_refusal(vb);
	if (vb->settings.mode == VB_HINT_MODE_SCAN && why) {
		dev_warn(&vb->vdev->dev,
			 "hint_mode=scan refused, using alloc: %s\n", why);
		vb->settings.mode = VB_HINT_MODE_ALLOC;
	}
}

static int vb_core_probe(struct virtio_device *vdev)
{
	struct vb_device *vb;
	int err;

	if (!vdev->config->get) {
		dev_err(&vdev->dev, "%s failure: config access disabled\n",
			__func__);
		return -EINVAL;
	}

	vb = kzalloc(sizeof(*vb), GFP_KERNEL);
	if (!vb)
		return -ENOMEM;
	vdev->priv = vb;
	vb->vdev = vdev;

	spin_lock_init(&vb->stop_update_lock);
	spin_lock_init(&vb->wake_lock);
	mutex_init(&vb->settings_lock);
	vb_inflate_init(vb);

	err = vb_hint_init(vb);
	if (err)
		goto out_free;

	err = vb_core_init_vqs(vb);
	if (err)
		goto out_hint;
	vb_mm_check();
	vb_core_init_settings(vb);

	err = vb_oom_register(vb);
	if (err)
		goto out_del_vqs;

	vb_report_write_poison(vb);
	err = vb_report_register(vb);
	if (err)
		goto out_oom;

	vb_debugfs_init(vb);
	vb_fault_init(vb);

	err = vb_core_pm_register(vb);
	if (err)
		goto out_debugfs;

	device_set_wakeup_capable(&vdev->dev, true);
	virtio_device_ready(vdev);

	/*
	 * Look at the target and the command id now: the device may have set
	 * them before we were ready, and will not raise an interrupt again.
	 */
	vb_core_config_changed(vdev);
	dev_info(&vdev->dev, "virtio_balloon %s: features 0x%llx, hint mode %s\n",
		 VB_VERSION, vdev->features,
		 vb_core_hint_mode(vb, vb->settings.mode) == VB_HINT_MODE_SCAN ?
		 "scan" : "alloc");
	return 0;

out_debugfs:
	vb_debugfs_exit(vb);
	vb_fault_exit(vb);
	vb_report_unregister(vb);
out_oom:
	vb_oom_unregister(vb);
out_del_vqs:
	vb_core_del_vqs(vb);
out_hint:
	vb_hint_exit(vb);
out_free:
	kfree(vb);
	vdev->priv = NULL;
	return err;
}

static void vb_core_remove(struct virtio_device *vdev)
{
	struct vb_device *vb = vdev->priv;

	vb_core_pm_unregister(vb);
	vb_debugfs_exit(vb);
	vb_fault_exit(vb);
	vb_report_unregister(vb);
	vb_oom_unregister(vb);
	vb_core_stop_updates(vb, true);
	cancel_work_sync(&vb->size_work);
	cancel_work_sync(&vb->stats_work);
	vb_core_wake_cancel(vb);
	device_set_wakeup_capable(&vdev->dev, false);
	vb_hint_quiesce(vb);

	vb_core_teardown(vb);
	vb_hint_exit(vb);
	kfree(vb);
}

#ifdef CONFIG_PM_SLEEP
static int vb_core_freeze(struct virtio_device *vdev)
{
	struct vb_device *vb = vdev->priv;

	/*
	 * The freezable workqueues are already frozen by the PM core: drop
	 * the balloon work they hold, restore queues it again.
	 */
	vb_report_unregister(vb);
	vb_core_stop_updates(vb, true);
	cancel_work_sync(&vb->size_work);
	cancel_work_sync(&vb->stats_work);
	vb_core_wake_cancel(vb);
	vb_hint_quiesce(vb);
	vb_core_teardown(vb);
	return 0;
}

static int vb_core_restore(struct virtio_device *vdev)
{
	struct vb_device *vb = vdev->priv;
	int err;

	err = vb_core_init_vqs(vb);
	if (!err && vb_fault_fail_restore(vb)) {
		vb_core_del_vqs(vb);
		err = -EIO;
	}
	if (err) {
		dev_warn(&vdev->dev, "restore failed: %d\n", err);
		return err;
	}

	vb_report_write_poison(vb);
	err = vb_report_register(vb);
	if (err)
		dev_warn(&vdev->dev, "free page reporting not restored: %d\n",
			 err);
	vb_hint_resume(vb);
	vb_core_stop_updates(vb, false);
	virtio_device_ready(vdev);

	/*
	 * Config interrupts were ignored while frozen: look at the balloon
	 * target and the command id now.
	 */
	vb_core_config_changed(vdev);
	vb_inflate_update_actual(vb);
	return 0;
}
#endif

static int vb_core_validate(struct virtio_device *vdev)
{
	/* page poison rules of free page reporting */
	vb_report_validate(vdev);

	/*
	 * No indirect descriptors: adding buffers must not allocate memory
	 * (page reporting runs with the zone lock dropped but under
	 * pressure, hint chains are bounded by the ring anyway).  No
	 * platform DMA: buffers are guest physical addresses.
	 */
	__virtio_clear_bit(vdev, VIRTIO_RING_F_INDIRECT_DESC);
	__virtio_clear_bit(vdev, VIRTIO_F_ACCESS_PLATFORM);

	/* HINT_KEEP_WRITES qualifies free page hinting and means nothing alone */
	if (!virtio_has_feature(vdev, VIRTIO_BALLOON_F_FREE_PAGE_HINT))
		__virtio_clear_bit(vdev, VIRTIO_BALLOON_F_HINT_KEEP_WRITES);

	return 0;
}

static unsigned int vb_core_features[] = {
	VIRTIO_BALLOON_F_MUST_TELL_HOST,
	VIRTIO_BALLOON_F_STATS_VQ,
	VIRTIO_BALLOON_F_DEFLATE_ON_OOM,
	VIRTIO_BALLOON_F_FREE_PAGE_HINT,
	VIRTIO_BALLOON_F_PAGE_POISON,
	VIRTIO_BALLOON_F_REPORTING,
	VIRTIO_BALLOON_F_HINT_KEEP_WRITES,
};

static const struct virtio_device_id vb_core_id_table[] = {
	{ VB_WIRE_DEVICE_ID, VIRTIO_DEV_ANY_ID },
	{ 0 },
};

static struct virtio_driver vb_core_driver = {
	.feature_table = vb_core_features,
	.feature_table_size = ARRAY_SIZE(vb_core_features),
	.driver.name = KBUILD_MODNAME,
	.driver.owner = THIS_MODULE,
	.driver.dev_groups = vb_sysfs_groups,
	.id_table = vb_core_id_table,
	.validate = vb_core_validate,
	.probe = vb_core_probe,
	.remove = vb_core_remove,
	.config_changed = vb_core_config_changed,
#ifdef CONFIG_PM_SLEEP
	.freeze = vb_core_freeze,
	.restore = vb_core_restore,
#endif
};

static int __init vb_core_module_init(void)
{
	int err;

	err = vb_core_check_params();
	if (err)
		return err;

	err = vb_mm_init();
	if (err)
		return err;
	vb_debugfs_module_init();
	err = register_virtio_driver(&vb_core_driver);
	if (err) {
		vb_debugfs_module_exit();
		vb_mm_exit();
	}
	return err;
}
module_init(vb_core_module_init);

static void __exit vb_core_module_exit(void)
{
	unregister_virtio_driver(&vb_core_driver);
	vb_debugfs_module_exit();
	vb_mm_exit();
}
module_exit(vb_core_module_exit);

MODULE_DEVICE_TABLE(virtio, vb_core_id_table);
MODULE_VERSION(VB_VERSION);
MODULE_DESCRIPTION("Virtio balloon driver with batched multi-order free page hinting");
MODULE_AUTHOR("balloon-hint project");
MODULE_LICENSE("GPL");
