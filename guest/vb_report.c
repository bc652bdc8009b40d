// SPDX-License-Identifier: GPL-2.0
/*
 * vb_report.c - free page reporting and the page-poison rules.
 *
 * Page reporting hands free buddy blocks (>= pageblock order) to the host,
 * which may discard them.  Reported pages stay in the free lists, so the
 * host must not change what the guest expects to find in a free page:
 *
 *  - if the guest neither poisons nor zeroes free pages, their content is
 *    undefined: PAGE_POISON is not needed and is cleared;
 *  - if it does (page_poison=1 or init_on_free=1) but the device did not
 *    accept PAGE_POISON, reporting is disabled: the host could replace the
 *    pattern;
 *  - with PAGE_POISON, poison_val is written before DRIVER_OK: 0 for
 *    init_on_free, PAGE_POISON bytes otherwise.
 *
 * Reporting is synchronous per batch: the page_reporting core waits for
 * report() to return, and we return only once the device used the buffer.
 */

#include <linux/mm.h>
#include <linux/poison.h>
#include <linux/page_reporting.h>

#include "vb.h"

void vb_report_validate(struct virtio_device *vdev)
{
	if (!want_init_on_free() && !page_poisoning_enabled_static())
		__virtio_clear_bit(vdev, VIRTIO_BALLOON_F_PAGE_POISON);
	else if (!virtio_has_feature(vdev, VIRTIO_BALLOON_F_PAGE_POISON))
		__virtio_clear_bit(vdev, VIRTIO_BALLOON_F_REPORTING);
}

void vb_report_write_poison(struct vb_device *vb)
{
	u32 poison_val = 0;

	if (!vb_has(vb, VIRTIO_BALLOON_F_PAGE_POISON))
		return;

	/* a single byte repeated: byte order does not matter */
	if (!want_init_on_free())
		memset(&poison_val, PAGE_POISON, sizeof(poison_val));

	virtio_cwrite_le(vb->vdev, struct vb_wire_config, poison_val,
			 &poison_val);
}

static int vb_report_fn(struct page_reporting_dev_info *pr_dev_info,
			struct scatterlist *sg, unsigned int nents)
{
	struct vb_device *vb = container_of(pr_dev_info, struct vb_device,
					    pr_dev_info);
	struct virtqueue *vq = vb->report_vq;
	unsigned int unused;
	int err;

	/* at most one batch is queued: an empty ring of >= 32 has room */
	err = virtqueue_add_inbuf(vq, sg, nents, vb, GFP_NOWAIT | __GFP_NOWARN);
	if (WARN_ON_ONCE(err))
		return err;

	virtqueue_kick(vq);

	/* the pages may be reused only after the device acknowledged them */
	wait_event(vb->acked, virtqueue_get_buf(vq, &unused));
	return 0;
}

int vb_report_register(struct vb_device *vb)
{
	int err;

	if (!vb_has(vb, VIRTIO_BALLOON_F_REPORTING) || !vb->report_vq)
		return 0;

	if (virtqueue_get_vring_size(vb->report_vq) < PAGE_REPORTING_CAPACITY)
		return -ENOSPC;

	vb->pr_dev_info.report = vb_report_fn;
	/*
	 * With 64 KiB base pages pageblock_order is 512 MiB; report 2 MiB
	 * (order 5) blocks instead, as the in-tree driver does.
	 */
	if (IS_ENABLED(CONFIG_ARM64) && PAGE_SHIFT == 16)
		vb->pr_dev_info.order = 5;

	err = page_reporting_register(&vb->pr_dev_info);
	if (err)
		return err;
	vb->pr_registered = true;
	return 0;
}

void vb_report_unregister(struct vb_device *vb)
{
	if (!vb->pr_registered)
		return;
	page_reporting_unregister(&vb->pr_dev_info);
	vb->pr_registered = false;
}
