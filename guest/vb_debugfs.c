// SPDX-License-Identifier: GPL-2.0
/*
 * vb_debugfs.c - /sys/kernel/debug/virtio_balloon/<dev>/
 *
 * What is for looking into the driver rather than for tuning it lives
 * here, not in sysfs, and is no ABI:
 *
 *   blocks_by_order   free blocks hinted since probe, per buddy order: one
 *                     line "<order> <blocks>" per order, 0 first
 *
 * The test build adds its fault injection files to the same directory
 * (vb_fault.c).  Without debugfs every call here does nothing.
 */

#include <linux/debugfs.h>
#include <linux/seq_file.h>

#include "vb.h"

static struct dentry *vb_debugfs_root;

static int vb_debugfs_by_order_show(struct seq_file *m, void *unused)
{
	struct vb_hint_stats st;
	int order;

	vb_hint_stats_snapshot(m->private, &st);
	for (order = 0; order < VB_HINT_NR_ORDERS; order++)
		seq_printf(m, "%d %llu\n", order, st.blocks_by_order[order]);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(vb_debugfs_by_order);

void vb_debugfs_init(struct vb_device *vb)
{
	vb->debugfs_dir = debugfs_create_dir(dev_name(&vb->vdev->dev),
					     vb_debugfs_root);
	if (vb->hint.wq)
		debugfs_create_file("blocks_by_order", 0400, vb->debugfs_dir,
				    vb, &vb_debugfs_by_order_fops);
}

void vb_debugfs_exit(struct vb_device *vb)
{
	debugfs_remove_recursive(vb->debugfs_dir);
	vb->debugfs_dir = NULL;
}

void vb_debugfs_module_init(void)
{
	vb_debugfs_root = debugfs_create_dir(KBUILD_MODNAME, NULL);
}

void vb_debugfs_module_exit(void)
{
	debugfs_remove_recursive(vb_debugfs_root);
	vb_debugfs_root = NULL;
}
