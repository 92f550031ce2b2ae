/* cc-flags: -lseccomp */
/*
 * seccomp-bpf: compiles a seccomp profile to the raw BPF program the kernel loads, with
 * libseccomp, the way crun does from the OCI config (default action, x86_64 + x86 + x32,
 * one rule per line), but as a binary tree (see below), and with x32 only where the kernel
 * runs x32 code (see kernel_runs_x32). crun then loads it from the run.oci.seccomp_bpf_data annotation
 * instead of compiling the profile again for every sandbox (~15 ms each).
 *
 * stdin, one directive per line:
 *   default allow|errno <errno>
 *   rule <syscall> allow|errno <errno> <nargs> [<index> <op> <a> <b>]...
 *     op: NE LT LE EQ GE GT MASKED_EQ (a = value, or mask for MASKED_EQ; b = valueTwo)
 * stdout: the BPF program. Exit 0, or 1 with a message on stderr.
 * Syscalls unknown to this kernel's table are skipped, as crun does.
 *
 * The i386 part is a filter of its own, merged in at the end. libseccomp adds an i386 rule on
 * `socket` (and the other socket calls) also as a rule on `socketcall(SYS_SOCKET)` without its
 * argument filters (socketcall passes them in memory): the first such rule decides what
 * socketcall(SYS_SOCKET) does, and a later rule of another action collides (EEXIST) and is
 * dropped. In one shared filter that dropped the rule for x86_64 too; apart, only i386 is
 * affected, and the profile orders its rules for it (see bundle/seccomp.ts, AF_VSOCK).
 */
#include <errno.h>
#include <seccomp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/*
 * Whether this kernel runs x32 code (x86_64 syscall numbers with bit 30 set). Most kernels
 * are built without it (CONFIG_X86_X32_ABI off): they answer ENOSYS to every such call, and
 * the x32 rules, ~30% of the program, are dead weight that crun keeps three times per
 * sandbox (in its copy of config.json, in base64; in its state dir; in the kernel: ~10 KiB
 * of host memory per sandbox). Without them the filter answers such a call, like any other
 * foreign architecture, ENOSYS itself (SCMP_FLTATR_ACT_BADARCH). Asked in a child, which a
 * filter of our own parent may kill: then x32 stays in, as before.
 */
static int kernel_runs_x32(void) {
  pid_t pid = fork();
  if (pid == 0) {
    long r = syscall(0x40000000L | __NR_getppid);
    _exit(r >= 0 ? 0 : errno == ENOSYS ? 1 : 2);
  }
  int st;
  if (pid < 0 || waitpid(pid, &st, 0) != pid) return 1;
  return !(WIFEXITED(st) && WEXITSTATUS(st) == 1);
}

static uint32_t action(const char *name, long err) {
  return strcmp(name, "allow") == 0 ? SCMP_ACT_ALLOW : SCMP_ACT_ERRNO((uint16_t)err);
}

static int op(const char *s, enum scmp_compare *out) {
  static const struct { const char *name; enum scmp_compare op; } ops[] = {
    { "NE", SCMP_CMP_NE }, { "LT", SCMP_CMP_LT }, { "LE", SCMP_CMP_LE }, { "EQ", SCMP_CMP_EQ },
    { "GE", SCMP_CMP_GE }, { "GT", SCMP_CMP_GT }, { "MASKED_EQ", SCMP_CMP_MASKED_EQ },
  };
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
    if (strcmp(s, ops[i].name) == 0) { *out = ops[i].op; return 0; }
  return -1;
}

int main(void) {
  char line[4096], word[64], name[128];
  long err;
  scmp_filter_ctx ctx = NULL, ctx32 = NULL;
  for (int n = 1; fgets(line, sizeof line, stdin); n++) {
    int used = 0;
    if (!ctx) {
      if (sscanf(line, "default %63s %ld", word, &err) != 2) { fprintf(stderr, "line %d: expected default\n", n); return 1; }
      if (!(ctx = seccomp_init(action(word, err))) || !(ctx32 = seccomp_init(action(word, err)))) { fprintf(stderr, "seccomp_init failed\n"); return 1; }
      /* A binary tree over syscall numbers instead of one linear chain (the same decisions):
       * a syscall whose rule looks at its arguments is found in ~log2(n) jumps instead of
       * walking hundreds, and the kernel's allow-cache, which runs the filter once per
       * syscall number when it is loaded, does a tenth of the work (measured: loading went
       * from ~1.1 to ~0.4 ms, 2,000 personality() calls from ~2.0 to ~0.5 ms). */
      if (seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2) < 0 || seccomp_attr_set(ctx32, SCMP_FLTATR_CTL_OPTIMIZE, 2) < 0) {
        fprintf(stderr, "binary tree optimization not supported\n");
        return 1;
      }
      if (seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_ERRNO(ENOSYS)) < 0 ||
          seccomp_attr_set(ctx32, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_ERRNO(ENOSYS)) < 0) {
        fprintf(stderr, "bad arch action not supported\n");
        return 1;
      }
      if ((kernel_runs_x32() && seccomp_arch_add(ctx, SCMP_ARCH_X32) < 0) || seccomp_arch_remove(ctx32, SCMP_ARCH_NATIVE) < 0 || seccomp_arch_add(ctx32, SCMP_ARCH_X86) < 0) {
        fprintf(stderr, "arch_add failed\n");
        return 1;
      }
      continue;
    }
    int nargs;
    if (sscanf(line, "rule %127s %63s %ld %d%n", name, word, &err, &nargs, &used) != 4 || nargs < 0 || nargs > 6) {
      fprintf(stderr, "line %d: bad rule\n", n);
      return 1;
    }
    struct scmp_arg_cmp args[6];
    char *p = line + used;
    for (int i = 0; i < nargs; i++) {
      unsigned idx; char opname[16]; unsigned long long a, b; int k = 0;
      if (sscanf(p, " %u %15s %llu %llu%n", &idx, opname, &a, &b, &k) != 4 || idx > 5 || op(opname, &args[i].op) < 0) {
        fprintf(stderr, "line %d: bad argument %d\n", n, i);
        return 1;
      }
      args[i].arg = idx; args[i].datum_a = a; args[i].datum_b = b;
      p += k;
    }
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) continue;
    scmp_filter_ctx both[2] = { ctx, ctx32 };
    for (int i = 0; i < 2; i++) {
      int rc = seccomp_rule_add_array(both[i], action(word, err), nr, (unsigned)nargs, args);
      /* -EACCES: the rule's action is the default one; nothing to add. */
      if (rc < 0 && rc != -EACCES && rc != -EEXIST) { fprintf(stderr, "line %d: %s%s: %s\n", n, name, i ? " (i386)" : "", strerror(-rc)); return 1; }
    }
  }
  if (!ctx) { fprintf(stderr, "empty profile\n"); return 1; }
  if (seccomp_merge(ctx, ctx32) < 0) { fprintf(stderr, "merge failed\n"); return 1; }
  if (seccomp_export_bpf(ctx, STDOUT_FILENO) < 0) { fprintf(stderr, "export failed\n"); return 1; }
  seccomp_release(ctx);
  return 0;
}
