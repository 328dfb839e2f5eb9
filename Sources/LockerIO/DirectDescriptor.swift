#if canImport(Glibc)
internal import Glibc
#endif
internal import Synchronization

/// A second descriptor on a file, for reads or writes past the page cache
/// (`O_DIRECT`). Its owner stops using it at the file system's first
/// refusal (EINVAL: an alignment it does not take) and goes through the
/// page cache from then on; it is closed once, by ``close()`` or deinit.
final class DirectDescriptor: Sendable {
    private let fileSystem: FileSystem
    /// -1 once closed, or if the file system refused the open.
    private let descriptor: Atomic<Int32>
    private let refused = Atomic(false)

    /// Takes over `fd` (nil: the open was refused).
    init(_ fd: Int32?, fileSystem: FileSystem) {
        self.fileSystem = fileSystem
        descriptor = Atomic(fd ?? -1)
    }

    deinit { close() }

    /// Whether I/O still goes past the page cache.
    var isUsable: Bool { descriptor.load(ordering: .relaxed) >= 0 && !refused.load(ordering: .relaxed) }

    /// Runs `io` on the descriptor and returns its result; nil, without
    /// running it, once closed or refused, and nil if the file system
    /// refuses it now (the caller then goes through the page cache). Any
    /// other error is `io`'s.
    func attempt<T>(_ io: (Int32) throws(IOError) -> T) throws(IOError) -> T? {
        let fd = descriptor.load(ordering: .relaxed)
        guard fd >= 0, !refused.load(ordering: .relaxed) else { return nil }
        do {
            return try io(fd)
        } catch where error.errno == EINVAL {
            refused.store(true, ordering: .relaxed)
            return nil
        }
    }

    /// Closes the descriptor. Call it when no I/O through it is under way.
    func close() {
        let fd = descriptor.exchange(-1, ordering: .relaxed)
        if fd >= 0 { fileSystem.close(fd) }
    }
}
