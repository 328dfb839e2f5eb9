#if canImport(Glibc)
internal import Glibc
#endif

/// A new file that an object's plaintext is written into, at offsets,
/// from one thread or several: where a fetch puts what it reads.
///
/// For a file of at least ``directMinimum`` bytes, the whole pages of a
/// write at a page offset from page-aligned memory (all of a large object
/// but the part of its last page, as the store hands it over) go from
/// memory to the disk past the page cache (`O_DIRECT`), and the rest
/// through it. Writing
/// a large fetch into the page cache is what bounds it: every page is
/// memory the kernel must find, zero and map before it is filled, and the
/// fetch must reach the disk anyway before it is reported done. The file
/// is then not in the page cache afterwards, and it pushed nothing else
/// out. Where the file system refuses (at open, or with EINVAL on a
/// write), everything goes through the page cache.
public final class OutputFile: Sendable {
    /// Smaller files are written through the page cache: a direct write
    /// waits for the disk, and a file of a few pages gains little. (Files
    /// of 1.35 MiB, `get -r` of 380: 0.47 s against 0.89 s through the
    /// page cache, medians of 8 where new pages were slow.)
    public static let directMinimum: UInt64 = 1 << 20

    private let fd: Int32
    private let path: String
    private let fileSystem: FileSystem
    private let direct: DirectDescriptor

    /// Writes into `fd`, open for writing the file at `path` (which is
    /// opened once more for the direct writes, if it still names the file
    /// `fd` is open on), which will hold `size` bytes. `fd` stays the
    /// caller's.
    public convenience init(fd: Int32, path: String, size: UInt64, fileSystem: FileSystem = FileSystem()) {
        self.init(fd: fd, path: path, fileSystem: fileSystem,
                  direct: size >= Self.directMinimum ? fileSystem.openForDirectWriting(path, sameFileAs: fd) : nil)
    }

    /// Writes into `fd`, open for writing the new file `name` in
    /// `directory` (which is opened once more there for the direct writes,
    /// if it still names the file `fd` is open on, and is not a link), which
    /// will hold `size` bytes. `fd` stays the caller's.
    public convenience init(fd: Int32, name: String, in directory: OpenDirectory, size: UInt64) {
        self.init(fd: fd, path: directory.path(of: name), fileSystem: directory.fileSystem,
                  direct: size >= Self.directMinimum ? directory.openForDirectWriting(name, sameFileAs: fd) : nil)
    }

    private init(fd: Int32, path: String, fileSystem: FileSystem, direct: Int32?) {
        self.fd = fd
        self.path = path
        self.fileSystem = fileSystem
        self.direct = DirectDescriptor(direct, fileSystem: fileSystem)
    }

    /// Closes the descriptor of the direct writes (`fd` stays open); a
    /// later write goes through the page cache. Call it when no write is
    /// under way.
    public func close() {
        direct.close()
    }

    /// Whether aligned writes still go past the page cache.
    public var writesPastThePageCache: Bool { direct.isUsable }

    /// Writes all of `bytes` at `offset`.
    public func write(_ bytes: UnsafeRawBufferPointer, at offset: UInt64) throws(IOError) {
        var done = 0
        let pages = Self.alignedPrefix(bytes, at: offset)
        // What a short write leaves goes through the page cache below, as
        // does the part of a last page, and everything once refused.
        if pages > 0, let n = try direct.attempt({ fd throws(IOError) in
            try fileSystem.pwrite(fd, UnsafeRawBufferPointer(rebasing: bytes[..<pages]), at: offset, path: path)
        }) {
            done = n
        }
        if done < bytes.count {
            try fileSystem.writeAll(fd, UnsafeRawBufferPointer(rebasing: bytes[done...]), at: offset + UInt64(done), path: path)
        }
    }

    /// How many of `bytes`, from their start, can be written directly at
    /// `offset`: their whole pages if offset and memory are page-aligned,
    /// else none.
    private static func alignedPrefix(_ bytes: UnsafeRawBufferPointer, at offset: UInt64) -> Int {
        let alignment = FileSystem.directAlignment
        guard offset % UInt64(alignment) == 0, Int(bitPattern: bytes.baseAddress) % alignment == 0 else { return 0 }
        return bytes.count - bytes.count % alignment
    }
}
