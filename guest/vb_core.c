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
 *    (vb_hint.c).  Two hint modes: "scan" (default) reads the buddy
 *    allocator's free blocks where they are and reports them, merged into
 *    ranges, without taking them: nothing is allocated, zeroed or held.
 *    "alloc" takes free blocks from the allocator, as the in-tree driver
 *    does, and holds them until the host says DONE (used when the guest
 *    poisons or zeroes free pages, where scan is not allowed).  Both go
 *    down to min_order, put several blocks in a descriptor chain, never
 *    spin on a full ring; alloc keeps a headroom reserve and returns a
 *    block only after the device has used the descriptor that carried it.
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
 * Locking: balloon_lock for inflate/deflate, stop_update_lock against the
 * config interrupt, hint.vq_lock serializes the free page vq, hint.lock
 * (spinlock, never held while allocating) protects hint block lists and
 * counters, settings_lock protects the sysfs settings.
 */

#include <linux/module.h>
#include <linux/slab.h>
#include <linux/mm.h>
#include <linux/virtio.h>
#include <linux/virtio_config.h>
#include <uapi/linux/virtio_ring.h>

#include "vb.h"

/* Module parameters: defaults of the per-device hint settings */
static bool hint_enabled = true;
module_param(hint_enabled, bool, 0444);
MODULE_PARM_DESC(hint_enabled, "Answer free page hint requests (default: 1)");

static char *hint_mode = "auto";
module_param(hint_mode, charp, 0444);
MODULE_PARM_DESC(hint_mode,
		 "How free memory is found: scan, alloc, or auto = scan unless free pages are poisoned or zeroed on free (default: auto)");

static uint hint_min_order;
module_param(hint_min_order, uint, 0444);
MODULE_PARM_DESC(hint_min_order,
		 "Smallest buddy order hinted, 0..MAX_ORDER-1 (default: 0)");

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
		 "Free memory (KiB) hinting never takes (default: 65536)");

static bool hint_drop_cache;
module_param(hint_drop_cache, bool, 0444);
MODULE_PARM_DESC(hint_drop_cache,
		 "Drop clean page cache before a hint round (default: 0)");

bool vb_param_fault_inject;
module_param_named(fault_inject, vb_param_fault_inject, bool, 0444);
MODULE_PARM_DESC(fault_inject,
		 "Create debugfs fault injection files for host tests (default: 0)");

static struct vb_hint_settings vb_core_defaults;

void vb_core_default_settings(struct vb_hint_settings *s)
{
	*s = vb_core_defaults;
}

static int vb_core_check_params(void)
{
	struct vb_hint_settings s = {
		.enabled = hint_enabled,
		.mode = vb_sysfs_parse_mode(hint_mode),
		.min_order = hint_min_order,
		.blocks_per_chain = hint_blocks_per_chain,
		.chains_per_kick = hint_chains_per_kick,
		.reserve_kb = hint_reserve_kb,
		.drop_cache = hint_drop_cache,
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
		queue_work(system_freezable_wq, &vb->size_work);
		vb_hint_config_changed(vb);
	}
	spin_unlock_irqrestore(&vb->stop_update_lock, flags);
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
	err = virtio_find_vqs(vb->vdev, VB_WIRE_VQ_MAX, vqs, callbacks, names,
			      NULL);
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
	if (err) {
		vb_hint_attach_vq(vb, NULL);
		vb->vdev->config->del_vqs(vb->vdev);
	}
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
	vb_inflate_release_all(vb);
	vb_inflate_update_actual(vb);

	virtio_reset_device(vb->vdev);
	/* the device returned or forgot every buffer: blocks are ours */
	vb_hint_release_after_reset(vb);

	vb->vdev->config->del_vqs(vb->vdev);
	vb->inflate_vq = NULL;
	vb->deflate_vq = NULL;
	vb->stats_vq = NULL;
	vb->report_vq = NULL;
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
	mutex_init(&vb->settings_lock);
	vb_core_default_settings(&vb->settings);
	vb_inflate_init(vb);

	err = vb_hint_init(vb);
	if (err)
		goto out_free;

	err = vb_core_init_vqs(vb);
	if (err)
		goto out_hint;

	err = vb_oom_register(vb);
	if (err)
		goto out_del_vqs;

	vb_report_write_poison(vb);
	err = vb_report_register(vb);
	if (err)
		goto out_oom;

	err = vb_sysfs_init(vb);
	if (err)
		goto out_report;

	err = vb_fault_init(vb);
	if (err)
		goto out_sysfs;

	virtio_device_ready(vdev);

	if (vb_inflate_towards_target(vb))
		vb_core_config_changed(vdev);
	dev_info(&vdev->dev, "virtio_balloon %s: features 0x%llx\n",
		 VB_VERSION, vdev->features);
	return 0;

out_sysfs:
	vb_sysfs_exit(vb);
out_report:
	vb_report_unregister(vb);
out_oom:
	vb_oom_unregister(vb);
out_del_vqs:
	vb_hint_attach_vq(vb, NULL);
	vdev->config->del_vqs(vdev);
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

	vb_fault_exit(vb);
	vb_sysfs_exit(vb);
	vb_report_unregister(vb);
	vb_oom_unregister(vb);
	vb_core_stop_updates(vb, true);
	cancel_work_sync(&vb->size_work);
	cancel_work_sync(&vb->stats_work);
	vb_hint_quiesce(vb);

	vb_core_teardown(vb);
	vb_hint_exit(vb);
	kfree(vb);
}

#ifdef CONFIG_PM_SLEEP
static int vb_core_freeze(struct virtio_device *vdev)
{
	struct vb_device *vb = vdev->priv;

	/* the freezable workqueues are already frozen by the PM core */
	vb_report_unregister(vb);
	vb_core_stop_updates(vb, true);
	vb_hint_quiesce(vb);
	vb_core_teardown(vb);
	return 0;
}

static int vb_core_restore(struct virtio_device *vdev)
{
	struct vb_device *vb = vdev->priv;
	int err;

	err = vb_core_init_vqs(vb);
	if (err)
		return err;

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

	/*
	 * HINT_HOLD promises that hinted pages stay untouched until their
	 * buffer is used; only alloc mode holds them.  Decided once, here:
	 * a device that negotiated it refuses a later switch to scan.
	 */
	if (vb_core_defaults.mode != VB_HINT_MODE_ALLOC)
		__virtio_clear_bit(vdev, VIRTIO_BALLOON_F_HINT_HOLD);
	return 0;
}

static unsigned int vb_core_features[] = {
	VIRTIO_BALLOON_F_MUST_TELL_HOST,
	VIRTIO_BALLOON_F_STATS_VQ,
	VIRTIO_BALLOON_F_DEFLATE_ON_OOM,
	VIRTIO_BALLOON_F_FREE_PAGE_HINT,
	VIRTIO_BALLOON_F_PAGE_POISON,
	VIRTIO_BALLOON_F_REPORTING,
	VIRTIO_BALLOON_F_HINT_HOLD,
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

	vb_fault_module_init();
	err = register_virtio_driver(&vb_core_driver);
	if (err)
		vb_fault_module_exit();
	return err;
}
module_init(vb_core_module_init);

static void __exit vb_core_module_exit(void)
{
	unregister_virtio_driver(&vb_core_driver);
	vb_fault_module_exit();
}
module_exit(vb_core_module_exit);

MODULE_DEVICE_TABLE(virtio, vb_core_id_table);
MODULE_VERSION(VB_VERSION);
MODULE_DESCRIPTION("Virtio balloon driver with batched multi-order free page hinting");
MODULE_AUTHOR("balloon-hint project");
MODULE_LICENSE("GPL");
