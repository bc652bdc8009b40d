# SPDX-License-Identifier: GPL-2.0
"""The boot-and-migrate harness of balloon-hint, shared by `make check`,
`make demo`, `make soak` and `make bench`.  It starts a source and a
destination QEMU (TCG) through QEMU's own Python package, drives the guest
over a command channel on its second serial port, migrates over a unix
socket, and verifies the guest's data on the destination against
checksums taken in the guest before migration.  The consoles are scanned
for kernel errors (a user-data checksum alone does not see kernel memory
corruption) and every QEMU's output for errors.

  env        paths, the QEMU binaries of each stack, guest kernels, QEMU's
             Python package, the log line
  channel    the command channel to the guest's /init (ttyS1)
  verdicts   the error patterns consoles and QEMU output are scanned for
  vm         one QEMU process (VM) and what the host reads of it
  workloads  what runs in the guest around a migration, and its checks
  migration  a migration over QMP, and migrate_once(): a whole run
  gdb        gdb attached to a running QEMU in non-stop mode
  cpu        CPU time of a QEMU's threads during a migration
  rigs       a guest moved between QEMUs step by step (fault tests)
  stop_race  migrations whose hint batches gdb holds (a fault test's)
  libvirt    two libvirt hosts on one machine, a migration through them
  hostfiles  files a test installs outside the tree, put back after it
  testlib    the test files' helpers: tags, facts, verdicts, cleanups

Importing env, channel, verdicts, vm, workloads, migration or gdb
changes nothing in the process.  A program that starts QEMUs calls
hb.vm.install_cleanup() so that its exit or SIGTERM/SIGHUP ends them;
every QEMU also dies with its parent (PR_SET_PDEATHSIG).
"""
