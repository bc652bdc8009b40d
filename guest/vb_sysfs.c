// SPDX-License-Identifier: GPL-2.0
/*
 * vb_sysfs.c - /sys/bus/virtio/devices/virtioN/free_page_hint/
 *
 * The group is one of the driver's dev_groups: the driver core adds it
 * after probe and removes it before remove, with the device's uevent in
 * between, and only for a device that offers free page hinting.  Kernels
 * that can hide a named group (SYSFS_GROUP_INVISIBLE) show no directory
 * without the feature; older ones show it empty.
 *
 * Knobs (read-write) are the device's settings, owned by vb_core.c.  A
 * write range-checks the value for its knob and stores it through the
 * core; a round copies the settings when it starts, so a write during a
 * round takes effect at the next round.  "mode" reads back the mode the
 * next round uses (auto resolved); "scan_refusal" says why auto is not
 * scan.  Values are unsigned decimal; anything
 * kstrtouint() rejects, and anything out of range, fails with -EINVAL and
 * leaves the value unchanged.
 *
 * Counters (read-only) come from a consistent snapshot of vb->hint.stats,
 * one value per file.  The blocks hinted per order are in debugfs
 * (vb_debugfs.c).  See
 * Documentation/ABI/testing/sysfs-bus-virtio-devices-free_page_hint.
 */

#include <linux/device.h>
#include <linux/sysfs.h>
#include <linux/kernel.h>
#include <linux/mm.h>

#include "vb.h"

struct vb_sysfs_knob {
	struct device_attribute attr;
	enum vb_knob knob;
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

/*
 * Is @val in range for @knob, for device @vb (NULL: the module parameters,
 * before any device)?  The ring size bounds blocks_per_chain (one
 * descriptor per block plus the STOP slot); scan must be safe on this
 * guest and device (vb_core_scan_refusal()).  No knob's range depends on
 * another knob.
 */
static int vb_sysfs_check(struct vb_device *vb, enum vb_knob knob,
			  unsigned int val)
{
	unsigned int ring_size = vb ? vb->hint.ring_size : 0;
	unsigned int max_bpc = VB_HINT_MAX_BPC;
	bool ok;

	if (ring_size >= 2)
		max_bpc = min(max_bpc, ring_size - 1);
	switch (knob) {
	case VB_KNOB_ENABLED:
		ok = val <= 1;
		break;
	case VB_KNOB_MODE:
		ok = val < VB_HINT_NR_MODES &&
		     (val != VB_HINT_MODE_SCAN || !vb_core_scan_refusal(vb));
		break;
	case VB_KNOB_MIN_ORDER:
	case VB_KNOB_ALLOC_MIN_ORDER:
		ok = val <= VB_HINT_MAX_ORDER;
		break;
	case VB_KNOB_BLOCKS_PER_CHAIN:
		ok = val >= 1 && val <= max_bpc;
		break;
	case VB_KNOB_CHAINS_PER_KICK:
		ok = val >= 1 && val <= VB_HINT_MAX_CPK;
		break;
	case VB_KNOB_RESERVE_KB:
		ok = val <= vb_sysfs_max_reserve_kb();
		break;
	case VB_KNOB_ALLOC_MAX_INFLIGHT_KB:
		ok = val >= VB_ALLOC_MIN_INFLIGHT_KB;
		break;
	case VB_KNOB_PCP_MAX_PAGES:
		ok = val <= VB_SCAN_PCP_MAX_PAGES;
		break;
	default:
		ok = false;
	}
	return ok ? 0 : -EINVAL;
}

/* Check every knob of @s, see vb_sysfs_check() */
int vb_sysfs_validate(const struct vb_hint_settings *s, struct vb_device *vb)
{
	enum vb_knob knob;
	int err;

	for (knob = 0; knob < VB_NR_KNOBS; knob++) {
		err = vb_sysfs_check(vb, knob, vb_core_settings_get(s, knob));
		if (err)
			return err;
	}
	return 0;
}

/*
 * Set @knob to @val if @val is in its range; otherwise leave it unchanged.
 * Only the knob written is checked: a range that moved since another knob
 * was set (reserve_kb follows totalram, which the balloon changes) does not
 * make this write fail.
 */
static int vb_sysfs_set(struct vb_device *vb, enum vb_knob knob,
			unsigned int val)
{
	int err = vb_sysfs_check(vb, knob, val);

	if (err)
		return err;
	vb_core_settings_set(vb, knob, val);
	return 0;
}

static ssize_t vb_sysfs_knob_show(struct device *dev,
				  struct device_attribute *attr, char *buf)
{
	struct vb_sysfs_knob *k = container_of(attr, struct vb_sysfs_knob,
					       attr);
	struct vb_hint_settings s;

	vb_core_settings_load(vb_sysfs_dev(dev), &s);
	return sysfs_emit(buf, "%u\n", vb_core_settings_get(&s, k->knob));
}

static ssize_t vb_sysfs_knob_store(struct device *dev,
				   struct device_attribute *attr,
				   const char *buf, size_t count)
{
	struct vb_sysfs_knob *k = container_of(attr, struct vb_sysfs_knob,
					       attr);
	unsigned int val;
	int err;

	/* rejects empty, signs other than '+', garbage; allows one '\n' */
	if (kstrtouint(buf, 10, &val))
		return -EINVAL;

	err = vb_sysfs_set(vb_sysfs_dev(dev), k->knob, val);
	return err ? err : count;
}

static const char * const vb_sysfs_mode_names[VB_HINT_NR_MODES] = {
	[VB_HINT_MODE_SCAN] = "scan",
	[VB_HINT_MODE_ALLOC] = "alloc",
	[VB_HINT_MODE_AUTO] = "auto",
};

/* The mode the next round uses: auto is shown resolved */
static ssize_t mode_show(struct device *dev, struct device_attribute *attr,
			 char *buf)
{
	struct vb_device *vb = vb_sysfs_dev(dev);
	struct vb_hint_settings s;

	vb_core_settings_load(vb, &s);
	return sysfs_emit(buf, "%s\n",
			  vb_sysfs_mode_names[vb_core_hint_mode(vb, s.mode)]);
}

static ssize_t mode_store(struct device *dev, struct device_attribute *attr,
			  const char *buf, size_t count)
{
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
	err = vb_sysfs_set(vb, VB_KNOB_MODE, mode);
	return err ? err : count;
}
static DEVICE_ATTR_RW(mode);

/* Why scan cannot be used on this guest and device, or "none" */
static ssize_t scan_refusal_show(struct device *dev,
				 struct device_attribute *attr, char *buf)
{
	const char *why = vb_core_scan_refusal(vb_sysfs_dev(dev));

	return sysfs_emit(buf, "%s\n", why ?: "none");
}
static DEVICE_ATTR_RO(scan_refusal);

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

static ssize_t cmd_id_show(struct device *dev, struct device_attribute *attr,
			   char *buf)
{
	struct vb_hint_stats st;

	vb_hint_stats_snapshot(vb_sysfs_dev(dev), &st);
	return sysfs_emit(buf, "%u\n", st.cmd_id);
}
static DEVICE_ATTR_RO(cmd_id);

/* Pages of the blocks hinted and not yet returned to mm, by state */
static ssize_t held_inflight_pages_show(struct device *dev,
					struct device_attribute *attr,
					char *buf)
{
	struct vb_device *vb = vb_sysfs_dev(dev);

	return sysfs_emit(buf, "%lu\n", READ_ONCE(vb->hint.inflight_pages));
}
static DEVICE_ATTR_RO(held_inflight_pages);

static ssize_t held_acked_pages_show(struct device *dev,
				     struct device_attribute *attr, char *buf)
{
	struct vb_device *vb = vb_sysfs_dev(dev);

	return sysfs_emit(buf, "%lu\n", READ_ONCE(vb->hint.acked_pages));
}
static DEVICE_ATTR_RO(held_acked_pages);

/* A knob: file @_file, enum vb_knob VB_KNOB_@_KNOB */
#define VB_SYSFS_KNOB(_file, _knob)					\
static struct vb_sysfs_knob vb_sysfs_knob_##_file = {			\
	.attr = __ATTR(_file, 0644, vb_sysfs_knob_show,			\
		       vb_sysfs_knob_store),				\
	.knob = VB_KNOB_##_knob,					\
}

/* A counter: file @_file, struct vb_hint_stats member @_field */
#define VB_SYSFS_COUNTER(_file, _field)					\
static struct vb_sysfs_counter vb_sysfs_ctr_##_file = {			\
	.attr = __ATTR(_file, 0444, vb_sysfs_counter_show, NULL),	\
	.offset = offsetof(struct vb_hint_stats, _field),		\
}

VB_SYSFS_KNOB(enabled, ENABLED);
VB_SYSFS_KNOB(min_order, MIN_ORDER);
VB_SYSFS_KNOB(alloc_min_order, ALLOC_MIN_ORDER);
VB_SYSFS_KNOB(blocks_per_chain, BLOCKS_PER_CHAIN);
VB_SYSFS_KNOB(chains_per_kick, CHAINS_PER_KICK);
VB_SYSFS_KNOB(reserve_kb, RESERVE_KB);
VB_SYSFS_KNOB(alloc_max_inflight_kb, ALLOC_MAX_INFLIGHT_KB);
VB_SYSFS_KNOB(pcp_max_pages, PCP_MAX_PAGES);

VB_SYSFS_COUNTER(rounds, rounds);
VB_SYSFS_COUNTER(blocks_hinted, blocks_hinted);
VB_SYSFS_COUNTER(ranges_hinted, ranges_hinted);
VB_SYSFS_COUNTER(bytes_hinted, bytes_hinted);
VB_SYSFS_COUNTER(round_blocks, round_blocks);
VB_SYSFS_COUNTER(round_bytes, round_bytes);
VB_SYSFS_COUNTER(blocks_returned_early, blocks_returned_early);
VB_SYSFS_COUNTER(ring_full_waits, ring_full_waits);
VB_SYSFS_COUNTER(inflight_waits, inflight_waits);
VB_SYSFS_COUNTER(stop_retries, stop_retries);
VB_SYSFS_COUNTER(last_round_ns, last_round_ns);
VB_SYSFS_COUNTER(last_round_cpu_ns, last_round_cpu_ns);
VB_SYSFS_COUNTER(rounds_cpu_ns, rounds_cpu_ns);
VB_SYSFS_COUNTER(round_pfns, round_pfns);
VB_SYSFS_COUNTER(round_scan_ns, round_scan_ns);
VB_SYSFS_COUNTER(round_max_hold_ns, round_max_hold_ns);
VB_SYSFS_COUNTER(max_hold_ns, max_hold_ns);
VB_SYSFS_COUNTER(round_pcp_pfns, round_pcp_pfns);
VB_SYSFS_COUNTER(max_pcp_hold_ns, max_pcp_hold_ns);
VB_SYSFS_COUNTER(rounds_timed_out, rounds_timed_out);

static struct attribute *vb_sysfs_attrs[] = {
	&dev_attr_mode.attr,
	&dev_attr_scan_refusal.attr,
	&vb_sysfs_knob_enabled.attr.attr,
	&vb_sysfs_knob_min_order.attr.attr,
	&vb_sysfs_knob_alloc_min_order.attr.attr,
	&vb_sysfs_knob_blocks_per_chain.attr.attr,
	&vb_sysfs_knob_chains_per_kick.attr.attr,
	&vb_sysfs_knob_reserve_kb.attr.attr,
	&vb_sysfs_knob_alloc_max_inflight_kb.attr.attr,
	&vb_sysfs_knob_pcp_max_pages.attr.attr,
	&dev_attr_cmd_id.attr,
	&dev_attr_held_inflight_pages.attr,
	&dev_attr_held_acked_pages.attr,
	&vb_sysfs_ctr_rounds.attr.attr,
	&vb_sysfs_ctr_blocks_hinted.attr.attr,
	&vb_sysfs_ctr_ranges_hinted.attr.attr,
	&vb_sysfs_ctr_bytes_hinted.attr.attr,
	&vb_sysfs_ctr_round_blocks.attr.attr,
	&vb_sysfs_ctr_round_bytes.attr.attr,
	&vb_sysfs_ctr_blocks_returned_early.attr.attr,
	&vb_sysfs_ctr_ring_full_waits.attr.attr,
	&vb_sysfs_ctr_inflight_waits.attr.attr,
	&vb_sysfs_ctr_stop_retries.attr.attr,
	&vb_sysfs_ctr_last_round_ns.attr.attr,
	&vb_sysfs_ctr_last_round_cpu_ns.attr.attr,
	&vb_sysfs_ctr_rounds_cpu_ns.attr.attr,
	&vb_sysfs_ctr_round_pfns.attr.attr,
	&vb_sysfs_ctr_round_scan_ns.attr.attr,
	&vb_sysfs_ctr_round_max_hold_ns.attr.attr,
	&vb_sysfs_ctr_max_hold_ns.attr.attr,
	&vb_sysfs_ctr_round_pcp_pfns.attr.attr,
	&vb_sysfs_ctr_max_pcp_hold_ns.attr.attr,
	&vb_sysfs_ctr_rounds_timed_out.attr.attr,
	NULL,
};

static bool vb_sysfs_has_hinting(struct kobject *kobj)
{
	return virtio_has_feature(dev_to_virtio(kobj_to_dev(kobj)),
				  VIRTIO_BALLOON_F_FREE_PAGE_HINT);
}

static umode_t vb_sysfs_attr_visible(struct kobject *kobj,
				     struct attribute *attr, int n)
{
	return vb_sysfs_has_hinting(kobj) ? attr->mode : 0;
}

#ifdef SYSFS_GROUP_INVISIBLE
static bool vb_sysfs_group_visible(struct kobject *kobj)
{
	return vb_sysfs_has_hinting(kobj);
}

DEFINE_SYSFS_GROUP_VISIBLE(vb_sysfs);

#define VB_SYSFS_IS_VISIBLE	SYSFS_GROUP_VISIBLE(vb_sysfs)
#else
#define VB_SYSFS_IS_VISIBLE	vb_sysfs_attr_visible
#endif

static const struct attribute_group vb_sysfs_group = {
	.name = "free_page_hint",
	.attrs = vb_sysfs_attrs,
	.is_visible = VB_SYSFS_IS_VISIBLE,
};

const struct attribute_group *vb_sysfs_groups[] = {
	&vb_sysfs_group,
	NULL,
};
