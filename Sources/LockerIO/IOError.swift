#if canImport(Glibc)
internal import Glibc
#endif

/// A failed system call: which call, on what, and the errno.
public struct IOError: Error, Equatable, Sendable, CustomStringConvertible {
    public var operation: String
    public var path: String
    public var errno: Int32

    public init(_ operation: String, path: String, errno: Int32) {
        self.operation = operation
        self.path = path
        self.errno = errno
    }

    public var description: String {
        "\(operation) \(path): \(String(cString: strerror(errno)))"
    }

    /// The file does not exist.
    public var isNotFound: Bool { errno == ENOENT }

    /// What ``FileSystem/openRegularFileForReading(_:)`` throws for a
    /// FIFO, device, socket or directory.
    static func notRegularFile(_ path: String) -> IOError {
        IOError(notRegularFileOperation, path: path, errno: EINVAL)
    }

    private static let notRegularFileOperation = "open (not a regular file)"

    /// A file that had to be a regular one was something else: a
    /// symbolic link (ELOOP), or see ``notRegularFile(_:)``.
    public var isNotRegularFile: Bool { errno == ELOOP || operation == Self.notRegularFileOperation }
}
