internal import CLockerSupport

/// Settings of the process's memory allocator.
public enum ProcessMemory {
    /// Caps glibc's malloc arenas at `count` (by default eight per core,
    /// each touching memory of its own once a thread allocates from it).
    /// Returns whether the allocator took the setting.
    @discardableResult
    public static func limitMallocArenas(to count: Int32) -> Bool {
        locker_limit_malloc_arenas(count) == 1
    }

    /// Has glibc's malloc serve every block of `bytes` or more from a
    /// mapping of its own, unmapped when the block is freed, for the life
    /// of the process. By default the threshold rises to the size of the
    /// largest such block freed (up to 32 MiB), and blocks of that size
    /// are then carved from the heap, which keeps them once freed.
    /// Returns whether the allocator took the setting.
    @discardableResult
    public static func fixMmapThreshold(at bytes: Int32) -> Bool {
        locker_fix_mmap_threshold(bytes) == 1
    }
}
