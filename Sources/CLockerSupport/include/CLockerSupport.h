#ifndef LOCKER_CLOCKERSUPPORT_H
#define LOCKER_CLOCKERSUPPORT_H

#include <stddef.h>

// prctl is variadic, so Swift cannot call it. This keeps a process that
// holds key material out of core dumps and away from ptrace by same-uid
// processes that are not its parent. Returns 0 on success, -1 with errno.
int locker_set_undumpable(void);

// syncfs(2) is declared only under _GNU_SOURCE, which the Glibc module
// does not set. Returns 0 on success, -1 with errno.
int locker_syncfs(int fd);

// renameat2(2) with RENAME_NOREPLACE, also declared only under _GNU_SOURCE:
// renames `from` to `to` only if `to` does not exist (EEXIST otherwise;
// EINVAL where the file system cannot). Returns 0 or -1 with errno.
int locker_rename_noreplace(const char *from, const char *to);

// The same, with each name relative to an open directory (renameat2(2)):
// `from` in `from_dir` becomes `to` in `to_dir`, if `to` does not exist.
int locker_renameat_noreplace(int from_dir, const char *from, int to_dir, const char *to);

// mallopt(M_ARENA_MAX, count): M_ARENA_MAX is a macro and mallopt is
// not in the Glibc module. Returns 1 on success, 0 on error.
int locker_limit_malloc_arenas(int count);

// mallopt(M_MMAP_THRESHOLD, bytes), for the same reason. Returns 1 on
// success, 0 on error.
int locker_fix_mmap_threshold(int bytes);

// O_NOATIME, defined only under _GNU_SOURCE: open(2) then leaves the
// file's access time alone. Refused (EPERM) unless the caller owns the
// file or has CAP_FOWNER.
int locker_o_noatime(void);

// O_PATH, also defined only under _GNU_SOURCE: a descriptor that names a
// directory for the *at calls without the right to read it.
int locker_o_path(void);

// O_DIRECT, also defined only under _GNU_SOURCE: reads and writes go
// between the caller's memory and the disk, past the page cache. Offsets,
// lengths and memory must be aligned to the file system's block size.
int locker_o_direct(void);

// cachestat(2) (Linux 6.5 and later) of the whole file `fd`: stores how
// many of its pages are in the page cache, without reading or faulting
// any. Returns 0, or -1 with errno (ENOSYS on an older kernel).
int locker_cached_pages(int fd, unsigned long long *pages);

// getrusage(2) with RUSAGE_THREAD, defined only under _GNU_SOURCE: how
// many blocks of 512 bytes the calling thread has read from storage
// (ru_inblock). A read the page cache serves adds none. Returns the count,
// or -1 with errno.
long long locker_thread_blocks_read(void);

// Opens `relative` below the directory `root` with `flags`, following no
// symbolic link anywhere in it and never leaving `root` (a link fails with
// ELOOP; an absolute path, or one that climbs out, with EXDEV): openat2(2)
// with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS, or where the kernel lacks
// it (ENOSYS) or a sandbox refuses it (EPERM without O_NOATIME; from then
// on, for every call), one component at a time with O_NOFOLLOW (which
// refuses any ".."). O_NOFOLLOW and O_CLOEXEC are added. With O_NOATIME,
// EPERM is returned as is: the caller retries without the flag.
// Returns the descriptor, or -1 with errno.
int locker_open_beneath(int root, const char *relative, int flags);

// What locker_open_beneath does where the kernel has no openat2(2): each
// directory on the way opened with O_PATH | O_DIRECTORY | O_NOFOLLOW below
// the last, the last component with `flags` | O_NOFOLLOW; ".." fails with
// EXDEV, as does an absolute path, and an empty path with ENOENT.
int locker_open_beneath_by_components(int root, const char *relative, int flags);

// fflush(stdout), then whether any write to stdout has failed (ferror):
// 0, or the errno of the failure (EIO when none was kept). `stdout` is a
// C global Swift 6 will not touch.
int locker_flush_stdout(void);

#endif
