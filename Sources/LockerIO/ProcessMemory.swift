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
}
