// SPDX-License-Identifier: GPL-2.0
/*
 * vb_sysfs.c - /sys/bus/virtio/devices/virtioN/free_page_hint/
 *
 * Knobs (read-write) are the device's settings, a struct vb_hint_settings of
 * unsigned ints owned by vb_core.c.  A write range-checks the knob written
 * here and stores it through the core; a round copies the settings when it
 * starts, so a write during a round takes effect at the next round.  "mode"
 * reads back the mode the next round uses (auto resolved).
 * Values are unsigned decimal; anything kstrtouint() rejects, and anything
 * out of range, fails with -EINVAL and leaves the value unchanged.
 *
 * Counters (read-only) come from a consistent snapshot of vb->hint.stats.
 * See Documentation/ABI/testing/sysfs-bus-virtio-devices-free_page_hint.
 */

#include <linux/device.h>
#include <linux/sysfs.h>
#include <linux/kernel.h>
#include <linux/mm.h>

#include "vb.h"

struct vb_sysfs_knob {
	struct device_attribute attr;
	size_t offset;
};

struct vb_sysfs_counter {
	struct device_attribute attr;
	size_t offset;
};

static struct vb_device *vb_sysfs_dev(struct device *dev)
{
	return dev_to_virtio(dev)->priv;
}

static unsigned int vb_sysfs_max_reserve_kb(void)
{
	u64 kb = (u64)totalram_pages() << (PAGE_SHIFT - 10);

	return min_t(u64, kb, UINT_MAX);
}

#define VB_SYSFS_OFF(_field) offsetof(struct vb_hint_settings, _field)

/*
 * Is @val in range for the knob at byte @offset of the settings, for device
 * @vb (NULL: the module parameters, before any device)?  The ring size
 * bounds blocks_per_chain (one descriptor per block plus the STOP slot);
 * scan must be safe on this guest and device (vb_core_scan_refusal()).  No
 * knob's range depends on another knob.
 */
static int vb_sysfs_check(struct vb_device *vb, size_t offset,
			  unsigned int val)
{
	unsigned int ring_size = vb ? vb->hint.ring_size : 0;
	unsigned int max_bpc = VB_HINT_MAX_BPC;
	bool ok;

	if (ring_size >= 2)
		max_bpc = min(max_bpc, ring_size - 1);
	switch (offset) {
	case VB_SYSFS_OFF(enabled):
		ok = val <= 1;
		break;
	case VB_SYSFS_OFF(mode):
		ok = val < VB_HINT_NR_MODES &&
		     (val != VB_HINT_MODE_SCAN || !vb_core_scan_refusal(vb));
		break;
	case VB_SYSFS_OFF(min_order):
	case VB_SYSFS_OFF(alloc_min_order):
		ok = val <= VB_HINT_MAX_ORDER;
		break;
	case VB_SYSFS_OFF(blocks_per_chain):
		ok = val >= 1 && val <= max_bpc;
		break;
	case VB_SYSFS_OFF(chains_per_kick):
		ok = val >= 1 && val <= VB_HINT_MAX_CPK;
		break;
	case VB_SYSFS_OFF(reserve_kb):
		ok = val <= vb_sysfs_max_reserve_kb();
		break;
	case VB_SYSFS_OFF(alloc_max_inflight_kb):
		ok = val >= VB_ALLOC_MIN_INFLIGHT_KB;
		break;
	default:
		ok = false;
	}
	return ok ? 0 : -EINVAL;
}

/* Its value, from a settings struct the caller only reads */
static unsigned int vb_sysfs_value(const struct vb_hint_settings *s,
				   size_t offset)
{
	return *(const unsigned int *)((const char *)s + offset);
}

/* Check every knob of @s, see vb_sysfs_check() */
int vb_sysfs_validate(const struct vb_hint_settings *s, struct vb_device *vb)
{
	size_t off;
	int err;

	for (off = 0; off < sizeof(*s); off += sizeof(unsigned int)) {
		err = vb_sysfs_check(vb, off, vb_sysfs_value(s, off));
		if (err)
			return err;
	}
	return 0;
}

static ssize_t vb_sysfs_knob_show(struct device *dev,
				  struct device_attribute *attr, char *buf)
{
	struct vb_sysfs_knob *knob = container_of(attr, struct vb_sysfs_knob,
						  attr);
	struct vb_device *vb = vb_sysfs_dev(dev);
	struct vb_hint_settings s;

	vb_core_settings_load(vb, &s);
	return sysfs_emit(buf, "%u\n", vb_sysfs_value(&s, knob->offset));
}

/*
 * Set the knob at @offset to @val if @val is in its range; otherwise leave
 * it unchanged.  Only the knob written is checked: a range that moved since
 * another knob was set (reserve_kb follows totalram, which the balloon
 * changes) does not make this write fail.
 */
static int vb_sysfs_set(struct vb_device *vb, size_t offset, unsigned int val)
{
	int err = vb_sysfs_check(vb, offset, val);

	if (err)
		return err;
	vb_core_settings_store(vb, offset, val);
	return 0;
}

static ssize_t vb_sysfs_knob_store(struct device *dev,
				   struct device_attribute *attr,
				   const char *buf, size_t count)
{
	struct vb_sysfs_knob *knob = container_of(attr, struct vb_sysfs_knob,
						  attr);
	unsigned int val;
	int err;

	/* rejects empty, signs other than '+', garbage; allows one '\n' */
	if (kstrtouint(buf, 10, &val))
		return -EINVAL;

	err = vb_sysfs_set(vb_sysfs_dev(dev), knob->offset, val);
	return err ? err : count;
}

static const char * const vb_sysfs_mode_names[VB_HINT_NR_MODES] = {
	[VB_HINT_MODE_SCAN] = "scan",
	[VB_HINT_MODE_ALLOC] = "alloc",
	[VB_HINT_MODE_AUTO] = "auto",
};

/* The mode the next round uses: auto is shown resolved */
static ssize_t vb_sysfs_mode_show(struct device *dev,
				  struct device_attribute *attr, char *buf)
{
	struct vb_device *vb = vb_sysfs_dev(dev);
	struct vb_hint_settings s;

	vb_core_settings_load(vb, &s);
	return sysfs_emit(buf, "%s\n",
			  vb_sysfs_mode_names[vb_core_hint_mode(vb, s.mode)]);
}

static ssize_t vb_sysfs_mode_store(struct device *dev,
				   struct device_attribute *attr,
				   const char *buf, size_t count)
{
	size_t off = offsetof(struct vb_hint_settings, mode);
	struct vb_device *vb = vb_sysfs_dev(dev);
	const char *why;
	int mode, err;

	/* "auto", "scan" or "alloc", one trailing newline allowed */
	mode = sysfs_match_string(vb_sysfs_mode_names, buf);
	if (mode < 0)
		return -EINVAL;

	why = mode == VB_HINT_MODE_SCAN ? vb_core_scan_refusal(vb) : NULL;
	if (why) {
		dev_warn_ratelimited(dev, "hint mode scan refused: %s\n", why);
		return -EINVAL;
	}
	err = vb_sysfs_set(vb, off, mode);
	return err ? err : count;
}

/* Parse a hint_mode module parameter: auto, scan or alloc */
int vb_sysfs_parse_mode(const char *str)
{
	return sysfs_match_string(vb_sysfs_mode_names, str);
}

static ssize_t vb_sysfs_counter_show(struct device *dev,
				     struct device_attribute *attr, char *buf)
{
	struct vb_sysfs_counter *ctr = container_of(attr,
						    struct vb_sysfs_counter,
						    attr);
	struct vb_hint_stats st;

	vb_hint_stats_snapshot(vb_sysfs_dev(dev), &st);
	return sysfs_emit(buf, "%llu\n",
			  *(u64 *)((char *)&st + ctr->offset));
}

static ssize_t vb_sysfs_cmd_id_show(struct device *dev,
				    struct device_attribute *attr, char *buf)
{
	struct vb_hint_stats st;

	vb_hint_stats_snapshot(vb_sysfs_dev(dev), &st);
	return sysfs_emit(buf, "%u\n", st.cmd_id);
}

static ssize_t vb_sysfs_by_order_show(struct device *dev,
				      struct device_attribute *attr,
				      char *buf)
{
	struct vb_hint_stats st;
	int order, len = 0;

	vb_hint_stats_snapshot(vb_sysfs_dev(dev), &st);
	for (order = 0; order < VB_HINT_NR_ORDERS; order++)
		len += sysfs_emit_at(buf, len, "%s%d:%llu",
				     order ? " " : "", order,
				     st.blocks_by_order[order]);
	len += sysfs_emit_at(buf, len, "\n");
	return len;
}

static ssize_t vb_sysfs_held_show(struct device *dev,
				  struct device_attribute *attr, char *buf)
{
	struct vb_device *vb = vb_sysfs_dev(dev);
	unsigned long inflight, acked;

	spin_lock(&vb->hint.lock);
	inflight = vb->hint.inflight_pages;
	acked = vb->hint.acked_pages;
	spin_unlock(&vb->hint.lock);
	return sysfs_emit(buf, "inflight:%lu acked:%lu\n", inflight, acked);
}

/* @_file is the sysfs name, @_field the struct vb_hint_settings member */
#define VB_SYSFS_KNOB(_file, _field) {					\
	.attr = __ATTR(_file, 0644, vb_sysfs_knob_show,			\
		       vb_sysfs_knob_store),				\
	.offset = offsetof(struct vb_hint_settings, _field),		\
}

/* @_file is the sysfs name, @_field the struct vb_hint_stats member */
#define VB_SYSFS_COUNTER(_file, _field) {				\
	.attr = __ATTR(_file, 0444, vb_sysfs_counter_show, NULL),	\
	.offset = offsetof(struct vb_hint_stats, _field),		\
}

static struct vb_sysfs_knob vb_sysfs_knobs[7] = {
	VB_SYSFS_KNOB(enabled, enabled),
	VB_SYSFS_KNOB(min_order, min_order),
	VB_SYSFS_KNOB(alloc_min_order, alloc_min_order),
	VB_SYSFS_KNOB(blocks_per_chain, blocks_per_chain),
	VB_SYSFS_KNOB(chains_per_kick, chains_per_kick),
	VB_SYSFS_KNOB(reserve_kb, reserve_kb),
	VB_SYSFS_KNOB(alloc_max_inflight_kb, alloc_max_inflight_kb),
};

static struct vb_sysfs_counter vb_sysfs_counters[17] = {
	VB_SYSFS_COUNTER(rounds, rounds),
	VB_SYSFS_COUNTER(blocks_hinted, blocks_hinted),
	VB_SYSFS_COUNTER(ranges_hinted, ranges_hinted),
	VB_SYSFS_COUNTER(bytes_hinted, bytes_hinted),
	VB_SYSFS_COUNTER(round_blocks, round_blocks),
	VB_SYSFS_COUNTER(round_bytes, round_bytes),
	VB_SYSFS_COUNTER(blocks_returned_early, blocks_returned_early),
	VB_SYSFS_COUNTER(ring_full_waits, ring_full_waits),
	VB_SYSFS_COUNTER(inflight_waits, inflight_waits),
	VB_SYSFS_COUNTER(last_round_ns, last_round_ns),
	VB_SYSFS_COUNTER(last_round_cpu_ns, last_round_cpu_ns),
	VB_SYSFS_COUNTER(rounds_cpu_ns, rounds_cpu_ns),
	VB_SYSFS_COUNTER(round_pfns, round_pfns),
	VB_SYSFS_COUNTER(round_scan_ns, round_scan_ns),
	VB_SYSFS_COUNTER(round_max_hold_ns, round_max_hold_ns),
	VB_SYSFS_COUNTER(max_hold_ns, max_hold_ns),
	VB_SYSFS_COUNTER(rounds_timed_out, rounds_timed_out),
};

static struct device_attribute vb_sysfs_attr_mode =
	__ATTR(mode, 0644, vb_sysfs_mode_show, vb_sysfs_mode_store);
static struct device_attribute vb_sysfs_attr_cmd_id =
	__ATTR(cmd_id, 0444, vb_sysfs_cmd_id_show, NULL);
static struct device_attribute vb_sysfs_attr_by_order =
	__ATTR(blocks_by_order, 0444, vb_sysfs_by_order_show, NULL);
static struct device_attribute vb_sysfs_attr_held =
	__ATTR(held_pages, 0444, vb_sysfs_held_show, NULL);

static struct attribute *vb_sysfs_attrs[] = {
	&vb_sysfs_knobs[0].attr.attr,
	&vb_sysfs_knobs[1].attr.attr,
	&vb_sysfs_knobs[2].attr.attr,
	&vb_sysfs_knobs[3].attr.attr,
	&vb_sysfs_knobs[4].attr.attr,
	&vb_sysfs_knobs[5].attr.attr,
	&vb_sysfs_knobs[6].attr.attr,
	&vb_sysfs_counters[0].attr.attr,
	&vb_sysfs_counters[1].attr.attr,
	&vb_sysfs_counters[2].attr.attr,
	&vb_sysfs_counters[3].attr.attr,
	&vb_sysfs_counters[4].attr.attr,
	&vb_sysfs_counters[5].attr.attr,
	&vb_sysfs_counters[6].attr.attr,
	&vb_sysfs_counters[7].attr.attr,
	&vb_sysfs_counters[8].attr.attr,
	&vb_sysfs_counters[9].attr.attr,
	&vb_sysfs_counters[10].attr.attr,
	&vb_sysfs_counters[11].attr.attr,
	&vb_sysfs_counters[12].attr.attr,
	&vb_sysfs_counters[13].attr.attr,
	&vb_sysfs_counters[14].attr.attr,
	&vb_sysfs_counters[15].attr.attr,
	&vb_sysfs_counters[16].attr.attr,
	&vb_sysfs_attr_mode.attr,
	&vb_sysfs_attr_cmd_id.attr,
	&vb_sysfs_attr_by_order.attr,
	&vb_sysfs_attr_held.attr,
	NULL,
};

static const struct attribute_group vb_sysfs_group = {
	.name = "free_page_hint",
	.attrs = vb_sysfs_attrs,
};

int vb_sysfs_init(struct vb_device *vb)
{
	int err;

	err = sysfs_create_group(&vb->vdev->dev.kobj, &vb_sysfs_group);
	if (err)
		return err;
	vb->sysfs_registered = true;
	return 0;
}

void vb_sysfs_exit(struct vb_device *vb)
{
	if (!vb->sysfs_registered)
		return;
	sysfs_remove_group(&vb->vdev->dev.kobj, &vb_sysfs_group);
	vb->sysfs_registered = false;
}
