// SPDX-License-Identifier: GPL-2.0
/*
 * hbwork - in-guest workload and data-verification tool for balloon-hint.
 *
 * Every command prints exactly one machine-readable result line:
 *   HBWORK <command> key=value ...
 *
 * Data written by "keep" and "hold" is a pure function of (seed, offset),
 * so verification needs no stored copy: every 8-byte word is checked and
 * each mismatching 4 KiB page is counted.  Bulk data that only has to be
 * there ("fill", "stale", "frag", "pressure") is cheaper to make: one
 * seeded value per 4 KiB page, varied per word (write_pages()).
 *
 * Commands:
 *   fill MIB [SEED]            touch MIB MiB of anonymous memory with non-zero
 *                              data, then free it (stale free memory)
 *   stale PATH MIB SEED        write a MIB MiB file of non-zero data (put it
 *                              on tmpfs; deleted, it is stale free memory)
 *   keep PATH MIB SEED         write a seeded file (put it on tmpfs), print
 *                              its checksum
 *   verify PATH MIB SEED       re-read the file, count bad pages, print the
 *                              checksum
 *   hold MIB SEED STATEFILE    daemon: keep MIB MiB of seeded anonymous memory
 *                              resident; on SIGUSR1 verify it and write the
 *                              result line to STATEFILE
 *   frag PATH MIB [HOLE_KB]    write a MIB MiB tmpfs file of stale data, then
 *                              punch out every other HOLE_KB (default 4):
 *                              free memory left in small holes
 *   fragverify PATH MIB [HOLE_KB]  check a file frag made: every page
 *                              between the holes as written, every page
 *                              of a hole zero
 *   churn MIB_S SECS [MIB]     allocate, write, verify and free memory at
 *                              MIB_S MiB/s for SECS seconds (0: until killed,
 *                              result on SIGTERM), within MIB MiB
 *   pressure PERCENT           allocate PERCENT % of MemTotal, touch it,
 *                              verify it, free it
 *   bandwidth MIB SECS         memory-bound loop, prints MiB/s
 *   meminfo                    MemFree/MemAvailable in KiB, and the free
 *                              pages held on the per-CPU lists (pcp_kb:
 *                              the "count:" of every pageset in
 *                              /proc/zoneinfo; MemFree leaves them out)
 *   write PATH [HEX]           one write(2) of the bytes HEX (none: a
 *                              zero-length write) to PATH opened O_WRONLY;
 *                              prints its return value and errno
 *   poke PATH OFFSET           flip every bit of the byte at OFFSET of PATH
 *                              (damage a kept file on purpose)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096UL
#define MIB (1024UL * 1024UL)
#define WORDS_PER_PAGE (PAGE / sizeof(uint64_t))

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x | 1;	/* never zero: a zero page is never "valid data" */
}

static uint64_t pattern(uint64_t seed, uint64_t word)
{
	return mix64(seed * 0x9e3779b97f4a7c15ULL + word);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *xmap(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED) {
		printf("HBWORK error op=mmap bytes=%zu errno=%d\n", len, errno);
		exit(2);
	}
	return p;
}

static void write_pattern(uint64_t *w, size_t nwords, uint64_t seed,
			  uint64_t first)
{
	for (size_t i = 0; i < nwords; i++)
		w[i] = pattern(seed, first + i);
}

/* Returns the number of 4 KiB pages holding at least one wrong word. */
static size_t check_pattern(const uint64_t *w, size_t nwords, uint64_t seed,
			    uint64_t first, uint64_t *sum)
{
	size_t bad = 0;

	for (size_t p = 0; p < nwords; p += WORDS_PER_PAGE) {
		int page_bad = 0;

		for (size_t i = p; i < p + WORDS_PER_PAGE && i < nwords; i++) {
			if (w[i] != pattern(seed, first + i))
				page_bad = 1;
			*sum = (*sum ^ w[i]) * 0x100000001b3ULL;
		}
		bad += page_bad;
	}
	return bad;
}

/*
 * Describe up to *budget bad pages of w[] on stderr, one HBBADPAGE line each:
 * guest PFN (from /proc/self/pagemap), how many words are wrong, whether the
 * page is all zero (never sent or dropped), and the first wrong word.
 */
static void describe_bad(const uint64_t *w, size_t nwords, uint64_t seed,
			 const char *what, unsigned long idx, int *budget)
{
	int fd = open("/proc/self/pagemap", O_RDONLY);

	for (size_t p = 0; p < nwords && *budget > 0; p += WORDS_PER_PAGE) {
		size_t nbad = 0, first = 0, nzero = 0;
		uint64_t ent = 0;

		for (size_t i = p; i < p + WORDS_PER_PAGE && i < nwords; i++) {
			if (w[i] != pattern(seed, i)) {
				if (!nbad++)
					first = i;
			}
			nzero += !w[i];
		}
		if (!nbad)
			continue;
		if (fd >= 0 && pread(fd, &ent, sizeof(ent),
				     (off_t)((uintptr_t)&w[p] / PAGE) * 8) != 8)
			ent = 0;
		fprintf(stderr, "HBBADPAGE %s=%lu page=%zu pfn=0x%llx bad_words=%zu zero_words=%zu first_bad=%zu got=%016llx want=%016llx\n",
			what, idx, p / WORDS_PER_PAGE,
			(unsigned long long)(ent >> 63 ? ent & ((1ULL << 55) - 1) : 0),
			nbad, nzero, first - p, (unsigned long long)w[first],
			(unsigned long long)pattern(seed, first));
		(*budget)--;
	}
	if (fd >= 0)
		close(fd);
}

/*
 * Bulk data: page p of w[] (page first + p of the data) holds a seeded value
 * per page, each word that value with its index folded in.  Every page
 * differs from every other, and no word is zero (the value is odd, the
 * index is shifted clear of bit 0).
 */
static void write_pages(uint64_t *w, size_t npages, uint64_t seed,
			uint64_t first)
{
	for (size_t p = 0; p < npages; p++, w += WORDS_PER_PAGE) {
		uint64_t v = pattern(seed, first + p);

		for (size_t i = 0; i < WORDS_PER_PAGE; i++)
			w[i] = v ^ (i << 1);
	}
}

/* Returns the number of pages of w[] not as write_pages() wrote them. */
static size_t check_pages(const uint64_t *w, size_t npages, uint64_t seed,
			  uint64_t first)
{
	size_t bad = 0;

	for (size_t p = 0; p < npages; p++, w += WORDS_PER_PAGE) {
		uint64_t v = pattern(seed, first + p), diff = 0;

		for (size_t i = 0; i < WORDS_PER_PAGE; i++)
			diff |= w[i] ^ v ^ (i << 1);
		bad += diff != 0;
	}
	return bad;
}

static uint64_t sum_words(const uint64_t *w, size_t nwords, uint64_t sum)
{
	for (size_t i = 0; i < nwords; i++)
		sum = (sum ^ w[i]) * 0x100000001b3ULL;
	return sum;
}

static int cmd_fill(unsigned long mib, uint64_t seed)
{
	size_t len = mib * MIB;
	uint64_t *p = xmap(len);
	double t = now_s();

	write_pages(p, len / PAGE, seed, 0);
	munmap(p, len);
	printf("HBWORK fill mib=%lu ms=%.0f\n", mib, (now_s() - t) * 1e3);
	return 0;
}

/*
 * Write a MIB MiB file at @path: the per-word pattern with its checksum in
 * *@sum, or bulk data (write_pages()) if @sum is NULL.  On failure, print
 * an HBWORK error line and return 2.
 */
static int write_file(const char *path, unsigned long mib, uint64_t seed,
		      uint64_t *sum)
{
	uint64_t *buf = xmap(MIB);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	int ret = 0;

	if (fd < 0) {
		printf("HBWORK error op=open path=%s errno=%d\n", path, errno);
		munmap(buf, MIB);
		return 2;
	}
	for (unsigned long m = 0; m < mib && !ret; m++) {
		if (sum) {
			write_pattern(buf, MIB / 8, seed, m * (MIB / 8));
			*sum = sum_words(buf, MIB / 8, *sum);
		} else {
			write_pages(buf, MIB / PAGE, seed, m * (MIB / PAGE));
		}
		if (write(fd, buf, MIB) != (ssize_t)MIB) {
			printf("HBWORK error op=write errno=%d\n", errno);
			ret = 2;
		}
	}
	close(fd);
	munmap(buf, MIB);
	return ret;
}

static int cmd_stale(const char *path, unsigned long mib, uint64_t seed)
{
	double t = now_s();

	if (write_file(path, mib, seed, NULL))
		return 2;
	printf("HBWORK stale path=%s mib=%lu ms=%.0f\n", path, mib,
	       (now_s() - t) * 1e3);
	return 0;
}

static int cmd_keep(const char *path, unsigned long mib, uint64_t seed)
{
	uint64_t sum = 0xcbf29ce484222325ULL;

	if (write_file(path, mib, seed, &sum))
		return 2;
	printf("HBWORK keep path=%s mib=%lu seed=%llu sum=%016llx\n", path, mib,
	       (unsigned long long)seed, (unsigned long long)sum);
	return 0;
}

static int cmd_verify(const char *path, unsigned long mib, uint64_t seed)
{
	uint64_t *buf = xmap(MIB);
	uint64_t sum = 0xcbf29ce484222325ULL;
	size_t bad = 0;
	int fd = open(path, O_RDONLY);

	if (fd < 0) {
		printf("HBWORK verify path=%s ok=0 bad_pages=-1 errno=%d\n",
		       path, errno);
		return 1;
	}
	for (unsigned long m = 0; m < mib; m++) {
		ssize_t n = read(fd, buf, MIB);

		if (n != (ssize_t)MIB) {
			memset(buf, 0, MIB);
			if (n < 0)
				n = 0;
		}
		bad += check_pattern(buf, MIB / 8, seed, m * (MIB / 8), &sum);
	}
	close(fd);
	printf("HBWORK verify path=%s mib=%lu ok=%d bad_pages=%zu sum=%016llx\n",
	       path, mib, bad == 0, bad, (unsigned long long)sum);
	return bad ? 1 : 0;
}

static volatile sig_atomic_t got_usr1, got_term;

static void on_usr1(int sig)
{
	(void)sig;
	got_usr1 = 1;
}

static void on_term(int sig)
{
	(void)sig;
	got_term = 1;
}

static int cmd_hold(unsigned long mib, uint64_t seed, const char *state)
{
	size_t len = mib * MIB;
	uint64_t *p = xmap(len);
	uint64_t sum = 0xcbf29ce484222325ULL;
	struct sigaction sa = { .sa_handler = on_usr1 };
	FILE *f;

	write_pattern(p, len / 8, seed, 0);
	sum = sum_words(p, len / 8, sum);
	sigaction(SIGUSR1, &sa, NULL);
	f = fopen(state, "w");
	if (!f)
		return 2;
	fprintf(f, "HBWORK hold mib=%lu seed=%llu sum=%016llx pid=%d\n", mib,
		(unsigned long long)seed, (unsigned long long)sum, getpid());
	fclose(f);
	for (;;) {
		pause();
		if (got_usr1) {
			size_t bad;
			char tmp[256];

			got_usr1 = 0;
			sum = 0xcbf29ce484222325ULL;
			bad = check_pattern(p, len / 8, seed, 0, &sum);
			snprintf(tmp, sizeof(tmp), "%s.tmp", state);
			f = fopen(tmp, "w");
			if (!f)
				continue;
			fprintf(f, "HBWORK holdcheck mib=%lu ok=%d bad_pages=%zu sum=%016llx\n",
				mib, bad == 0, bad, (unsigned long long)sum);
			fclose(f);
			rename(tmp, state);
		}
	}
	return 0;
}

static int cmd_frag(const char *path, unsigned long mib, unsigned long hole_kb)
{
	size_t len = mib * MIB;
	size_t hole = hole_kb ? hole_kb * 1024 : PAGE;
	size_t holes = 0;
	int fd;

	if (write_file(path, mib, 0x5eed, NULL))
		return 2;
	fd = open(path, O_WRONLY);
	if (fd < 0) {
		printf("HBWORK error op=open path=%s errno=%d\n", path, errno);
		return 2;
	}
	for (size_t off = 0; off + hole <= len; off += 2 * hole) {
		if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			      off, hole) == 0)
			holes++;
	}
	close(fd);
	printf("HBWORK frag path=%s mib=%lu hole_kb=%zu holes=%zu\n", path, mib,
	       hole / 1024, holes);
	return 0;
}

static int cmd_fragverify(const char *path, unsigned long mib,
			  unsigned long hole_kb)
{
	size_t len = mib * MIB, hole = hole_kb ? hole_kb * 1024 : PAGE;
	uint64_t *buf = xmap(MIB);
	size_t bad = 0, resident = 0;
	int fd = open(path, O_RDONLY);

	if (fd < 0) {
		printf("HBWORK fragverify path=%s ok=0 bad_pages=-1 errno=%d\n",
		       path, errno);
		munmap(buf, MIB);
		return 1;
	}
	for (unsigned long m = 0; m < mib; m++) {
		ssize_t n = read(fd, buf, MIB);

		if (n != (ssize_t)MIB) {
			memset(buf, 0xff, MIB);	/* short: every page is bad */
			if (n < 0)
				n = 0;
		}
		for (size_t p = 0; p < MIB / PAGE; p++) {
			size_t off = m * MIB + p * PAGE;
			size_t start = off - off % (2 * hole);
			const uint64_t *w = buf + p * WORDS_PER_PAGE;
			uint64_t diff = 0;

			if (off % (2 * hole) < hole && start + hole <= len) {
				for (size_t i = 0; i < WORDS_PER_PAGE; i++)
					diff |= w[i];
				bad += diff != 0;
			} else {
				resident++;
				bad += check_pages(w, 1, 0x5eed, off / PAGE);
			}
		}
	}
	close(fd);
	munmap(buf, MIB);
	printf("HBWORK fragverify path=%s mib=%lu ok=%d bad_pages=%zu resident_pages=%zu\n",
	       path, mib, bad == 0, bad, resident);
	return bad ? 1 : 0;
}

/*
 * Churn: a ring of 1 MiB buffers inside a MIB-sized window.  Each step frees
 * the oldest buffer (after verifying it) and allocates and writes a new one.
 */
/* Check churn ring buffer @idx (1 MiB); describe its bad pages, if any */
static size_t churn_check(const uint64_t *w, uint64_t seed, unsigned long idx,
			  uint64_t *sum, int *budget)
{
	size_t bad = check_pattern(w, MIB / 8, seed, 0, sum);

	if (bad)
		describe_bad(w, MIB / 8, seed, "ring", idx, budget);
	return bad;
}

static int cmd_churn(unsigned long rate, unsigned long secs, unsigned long mib)
{
	unsigned long nbuf = mib ? mib : 64;
	uint64_t **ring = calloc(nbuf, sizeof(*ring));
	uint64_t *seeds = calloc(nbuf, sizeof(*seeds));
	struct sigaction sa = { .sa_handler = on_term };
	double t0 = now_s(), next = t0;
	unsigned long steps = 0, head = 0;
	size_t bad = 0, verified = 0;
	uint64_t sum = 0;
	int budget = 16;

	if (!ring || !seeds)
		return 2;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	while (!got_term && (secs == 0 || now_s() - t0 < secs)) {
		if (ring[head]) {
			bad += churn_check(ring[head], seeds[head], head, &sum,
					   &budget);
			verified += MIB;
			munmap(ring[head], MIB);
		}
		ring[head] = xmap(MIB);
		seeds[head] = steps * 7919 + 1;
		write_pattern(ring[head], MIB / 8, seeds[head], 0);
		head = (head + 1) % nbuf;
		steps++;
		if (rate) {
			next += 1.0 / rate;
			while (now_s() < next && !got_term)
				usleep(1000);
		}
	}
	for (unsigned long i = 0; i < nbuf; i++) {
		if (ring[i]) {
			bad += churn_check(ring[i], seeds[i], i, &sum, &budget);
			verified += MIB;
		}
	}
	printf("HBWORK churn mib_written=%lu verified_bytes=%zu ok=%d bad_pages=%zu secs=%.1f\n",
	       steps, verified, bad == 0, bad, now_s() - t0);
	return bad ? 1 : 0;
}

static unsigned long meminfo(const char *key)
{
	char line[256];
	unsigned long v = 0;
	size_t klen = strlen(key);
	FILE *f = fopen("/proc/meminfo", "r");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, key, klen) && line[klen] == ':') {
			v = strtoul(line + klen + 1, NULL, 10);
			break;
		}
	}
	fclose(f);
	return v;
}

/* Pages on the per-CPU free lists of every zone, in KiB */
static unsigned long pcp_kb(void)
{
	char line[256];
	unsigned long pages = 0;
	FILE *f = fopen("/proc/zoneinfo", "r");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		const char *p = line + strspn(line, " \t");

		if (!strncmp(p, "count:", 6))
			pages += strtoul(p + 6, NULL, 10);
	}
	fclose(f);
	return pages * (PAGE / 1024);
}

static int cmd_pressure(unsigned long pct)
{
	size_t len = meminfo("MemTotal") * 1024UL / 100 * pct;
	uint64_t *p;
	size_t bad;

	len &= ~(PAGE - 1);
	p = xmap(len);
	write_pages(p, len / PAGE, 77, 0);
	bad = check_pages(p, len / PAGE, 77, 0);
	munmap(p, len);
	printf("HBWORK pressure mib=%zu ok=%d bad_pages=%zu\n", len / MIB,
	       bad == 0, bad);
	return bad ? 1 : 0;
}

static int cmd_bandwidth(unsigned long mib, unsigned long secs)
{
	size_t len = mib * MIB;
	uint64_t *p = xmap(len);
	double t0 = now_s();
	unsigned long passes = 0;

	while (now_s() - t0 < secs) {
		write_pattern(p, len / 8, passes, 0);
		passes++;
	}
	printf("HBWORK bandwidth mib_s=%.1f\n", passes * mib / (now_s() - t0));
	return 0;
}

static unsigned long num(const char *s)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 0);
	if (errno || *end || end == s) {
		printf("HBWORK error op=args bad_number=%s\n", s);
		exit(2);
	}
	return v;
}

static int cmd_write(const char *path, const char *hex)
{
	unsigned char buf[256];
	size_t len = 0;
	ssize_t r;
	int fd, err;

	while (hex[0] && hex[1] && len < sizeof(buf)) {
		unsigned int b;

		if (sscanf(hex, "%2x", &b) != 1)
			break;
		buf[len++] = b;
		hex += 2;
	}
	fd = open(path, O_WRONLY);
	if (fd < 0) {
		printf("HBWORK write ret=-1 errno=%d op=open\n", errno);
		return 1;
	}
	r = write(fd, buf, len);
	err = r < 0 ? errno : 0;
	close(fd);
	printf("HBWORK write len=%zu ret=%zd errno=%d\n", len, r, err);
	return r == (ssize_t)len ? 0 : 1;
}

static int cmd_poke(const char *path, unsigned long off)
{
	unsigned char b;
	int fd = open(path, O_RDWR);

	if (fd < 0 || pread(fd, &b, 1, off) != 1) {
		printf("HBWORK poke ok=0 errno=%d\n", errno);
		return 1;
	}
	b ^= 0xff;
	if (pwrite(fd, &b, 1, off) != 1) {
		printf("HBWORK poke ok=0 errno=%d\n", errno);
		return 1;
	}
	close(fd);
	printf("HBWORK poke ok=1 offset=%lu byte=0x%02x\n", off, b);
	return 0;
}

int main(int argc, char **argv)
{
	const char *c = argc > 1 ? argv[1] : "";

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(c, "fill") && argc >= 3)
		return cmd_fill(num(argv[2]), argc > 3 ? num(argv[3]) : 1);
	if (!strcmp(c, "stale") && argc == 5)
		return cmd_stale(argv[2], num(argv[3]), num(argv[4]));
	if (!strcmp(c, "keep") && argc == 5)
		return cmd_keep(argv[2], num(argv[3]), num(argv[4]));
	if (!strcmp(c, "verify") && argc == 5)
		return cmd_verify(argv[2], num(argv[3]), num(argv[4]));
	if (!strcmp(c, "hold") && argc == 5)
		return cmd_hold(num(argv[2]), num(argv[3]), argv[4]);
	if (!strcmp(c, "fragverify") && argc >= 4)
		return cmd_fragverify(argv[2], num(argv[3]),
				      argc > 4 ? num(argv[4]) : 4);
	if (!strcmp(c, "frag") && argc >= 4)
		return cmd_frag(argv[2], num(argv[3]), argc > 4 ? num(argv[4]) : 4);
	if (!strcmp(c, "churn") && argc >= 4)
		return cmd_churn(num(argv[2]), num(argv[3]),
				 argc > 4 ? num(argv[4]) : 0);
	if (!strcmp(c, "pressure") && argc == 3)
		return cmd_pressure(num(argv[2]));
	if (!strcmp(c, "bandwidth") && argc == 4)
		return cmd_bandwidth(num(argv[2]), num(argv[3]));
	if (!strcmp(c, "write") && (argc == 3 || argc == 4))
		return cmd_write(argv[2], argc == 4 ? argv[3] : "");
	if (!strcmp(c, "poke") && argc == 4)
		return cmd_poke(argv[2], num(argv[3]));
	if (!strcmp(c, "meminfo")) {
		printf("HBWORK meminfo free_kb=%lu avail_kb=%lu total_kb=%lu pcp_kb=%lu\n",
		       meminfo("MemFree"), meminfo("MemAvailable"),
		       meminfo("MemTotal"), pcp_kb());
		return 0;
	}
	fprintf(stderr, "usage: see the comment at the top of hbwork.c\n");
	return 2;
}
