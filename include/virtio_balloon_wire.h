/* SPDX-License-Identifier: GPL-2.0 */
/*
 * virtio_balloon_wire.h - virtio-balloon wire format shared by the guest
 * driver (kernel), host-side C tests and the Python tests.
 *
 * Everything in here describes bytes that cross the guest/host boundary:
 * feature bits, the config space layout, reserved command ids, statistics
 * tags and virtqueue names.  It builds in the kernel and in plain userspace
 * C: it only needs <linux/types.h> and <linux/virtio_types.h>, which both
 * environments provide.
 *
 * Constants are plain "#define NAME value" lines on purpose: the Python
 * tests parse them with a regular expression.  Comments go on the line
 * above, never after the value.
 *
 * Byte order: the balloon config space is little-endian even for legacy
 * devices.  Buffers on the virtqueues (pfn arrays, command ids, stats) use
 * the virtio byte order of the device (little-endian for VIRTIO_F_VERSION_1).
 */
#ifndef VIRTIO_BALLOON_WIRE_H
#define VIRTIO_BALLOON_WIRE_H

#include <linux/types.h>
#include <linux/virtio_types.h>

/* virtio device id of the balloon */
#define VB_WIRE_DEVICE_ID 5

/* Feature bits */
/* Tell the host before reclaiming (deflating) pages */
#define VIRTIO_BALLOON_F_MUST_TELL_HOST 0
/* Memory statistics virtqueue */
#define VIRTIO_BALLOON_F_STATS_VQ 1
/* Deflate the balloon when the guest is out of memory */
#define VIRTIO_BALLOON_F_DEFLATE_ON_OOM 2
/* Free page hinting virtqueue */
#define VIRTIO_BALLOON_F_FREE_PAGE_HINT 3
/* The guest poisons or initializes free pages: poison_val is valid */
#define VIRTIO_BALLOON_F_PAGE_POISON 4
/* Free page reporting virtqueue */
#define VIRTIO_BALLOON_F_REPORTING 5
/*
 * balloon-hint extension, not in the virtio spec (bit pending reservation;
 * 6-8 are used by crosvm and proposals): the device keeps, that is logs and
 * later sends, every guest write made after it issued a free page hint
 * command id.  The driver may then hint free pages it does not hold (the
 * scan mode of our guest driver).  Offered only with FREE_PAGE_HINT.
 */
#define VIRTIO_BALLOON_F_HINT_KEEP_WRITES 16

/* PFNs on the inflate and deflate queues are in units of 4 KiB */
#define VIRTIO_BALLOON_PFN_SHIFT 12

/* Reserved free page hint command ids */
#define VIRTIO_BALLOON_CMD_ID_STOP 0
#define VIRTIO_BALLOON_CMD_ID_DONE 1
/* Host-issued hint command ids start here (QEMU convention) */
#define VIRTIO_BALLOON_FREE_PAGE_HINT_CMD_ID_MIN 0x80000000
/* Size in bytes of a command id buffer on the free page vq */
#define VB_WIRE_CMD_ID_SIZE 4

/* Config space layout: byte offsets of struct vb_wire_config members */
#define VB_WIRE_CFG_NUM_PAGES 0
#define VB_WIRE_CFG_ACTUAL 4
#define VB_WIRE_CFG_FREE_PAGE_HINT_CMD_ID 8
#define VB_WIRE_CFG_POISON_VAL 12
#define VB_WIRE_CFG_SIZE 16

struct vb_wire_config {
	/* Number of 4 KiB pages the host wants the guest to give up */
	__le32 num_pages;
	/* Number of 4 KiB pages the guest has in the balloon */
	__le32 actual;
	/* Free page hint command id (read-only for the guest) */
	__le32 free_page_hint_cmd_id;
	/* Fill value of free pages when PAGE_POISON is negotiated */
	__le32 poison_val;
};

/* Statistics tags (same set as Linux 6.12) */
#define VIRTIO_BALLOON_S_SWAP_IN 0
#define VIRTIO_BALLOON_S_SWAP_OUT 1
#define VIRTIO_BALLOON_S_MAJFLT 2
#define VIRTIO_BALLOON_S_MINFLT 3
#define VIRTIO_BALLOON_S_MEMFREE 4
#define VIRTIO_BALLOON_S_MEMTOT 5
#define VIRTIO_BALLOON_S_AVAIL 6
#define VIRTIO_BALLOON_S_CACHES 7
#define VIRTIO_BALLOON_S_HTLB_PGALLOC 8
#define VIRTIO_BALLOON_S_HTLB_PGFAIL 9
#define VIRTIO_BALLOON_S_OOM_KILL 10
#define VIRTIO_BALLOON_S_ALLOC_STALL 11
#define VIRTIO_BALLOON_S_ASYNC_SCAN 12
#define VIRTIO_BALLOON_S_DIRECT_SCAN 13
#define VIRTIO_BALLOON_S_ASYNC_RECLAIM 14
#define VIRTIO_BALLOON_S_DIRECT_RECLAIM 15
#define VIRTIO_BALLOON_S_NR 16

/*
 * One statistics entry: 10 bytes, no padding, virtio byte order.  The
 * 64-bit value is unaligned in the array, so it is declared as bytes (copy
 * a __virtio64 in and out with memcpy()); every member has an alignment of
 * at most 2, so the struct needs no packing attribute.
 */
#define VB_WIRE_STAT_SIZE 10
struct vb_wire_stat {
	__virtio16 tag;
	__u8 val[8];
};

/* Virtqueue slots before compaction (absent features take no index) */
#define VB_WIRE_VQ_INFLATE 0
#define VB_WIRE_VQ_DEFLATE 1
#define VB_WIRE_VQ_STATS 2
#define VB_WIRE_VQ_FREE_PAGE 3
#define VB_WIRE_VQ_REPORTING 4
#define VB_WIRE_VQ_MAX 5

/* Virtqueue names */
#define VB_WIRE_VQ_NAME_INFLATE "inflate"
#define VB_WIRE_VQ_NAME_DEFLATE "deflate"
#define VB_WIRE_VQ_NAME_STATS "stats"
#define VB_WIRE_VQ_NAME_FREE_PAGE "free_page_vq"
#define VB_WIRE_VQ_NAME_REPORTING "reporting_vq"

#endif /* VIRTIO_BALLOON_WIRE_H */
