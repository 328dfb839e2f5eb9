import FoundationEssentials
import Glibc
import LockerIO

/// Tells whether a local file changed while it was being read to be
/// stored, as tar's "file changed as we read it" does. The object stored
/// is what was read; if the file was written meanwhile, that may mix old
/// and new contents, and the user is told.
///
/// It changed if its size, modification time or status-change time at the
/// end of the read differ from those at the open. (The bytes read are not
/// compared with the size: files in /proc and /sys give more or fewer than
/// their size says.) Standard input and other streams are not watched.
struct SourceWatch {
    private let fd: Int32
    private let opened: FileStatus?

    /// `opened`: what `fd` was just after the open. A descriptor that is
    /// not a regular file is never reported.
    init(_ fd: Int32, opened: FileStatus?) {
        self.fd = fd
        self.opened = opened?.isRegularFile == true ? opened : nil
    }

    /// Whether the file changed since the open, as far as a look now can
    /// tell. Call it once the last read has returned 0, before the
    /// descriptor closes: a write after that is not this read's concern.
    func changed() -> Bool {
        guard let opened else { return false }
        // A file that can no longer be looked at is not reported: the read
        // itself succeeded, and nothing says it changed.
        guard let now = try? FileSystem().status(of: fd, path: "") else { return false }
        return now.mayDiffer(from: opened)
    }
}

/// The local files `put -r` found changed while it read them. Safe to
/// add to from the threads that read a batch ahead.
final class ChangedSources: @unchecked Sendable {
    private let lock = LockerIO.Lock()
    private var paths: [String] = []

    func add(_ path: String) { lock.withLock { paths.append(path) } }

    var count: Int { lock.withLock { paths.count } }

    /// One warning line per file, in path order.
    func warnEach() {
        for path in lock.withLock({ paths.sorted() }) {
            warn(Self.warning(path))
        }
    }

    static func warning(_ path: String) -> String {
        "\(path) changed while it was read: stored as read, which may mix its old and new contents"
    }
}
