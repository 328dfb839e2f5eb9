import Foundation
import LockerIO
import Synchronization

/// What the N-th system call (counted from 1 after ``FaultyFileSystem/arm(_:)``)
/// does instead of its job.
enum Fault: Sendable, CustomStringConvertible {
    /// No fault: only count.
    case none
    /// Call `at` fails with `errno`, without being made.
    case failOnce(at: Int, errno: Int32)
    /// Every call from `at` on fails with `errno`: the disk is gone.
    case failFrom(at: Int, errno: Int32)
    /// Call `at` fails with EINTR, without being made.
    case interruptOnce(at: Int)
    /// Call `at`, if it is a write of more than one byte, writes half.
    case shortWrite(at: Int)

    var description: String {
        switch self {
        case .none: "none"
        case .failOnce(let at, let e): "\(Self.name(e)) once at \(at)"
        case .failFrom(let at, let e): "\(Self.name(e)) from \(at) on"
        case .interruptOnce(let at): "EINTR once at \(at)"
        case .shortWrite(let at): "short write at \(at)"
        }
    }

    /// Whether the state on disk after the call is what a crash at this
    /// call would leave, with no chance to clean up.
    var isPersistent: Bool {
        if case .failFrom = self { return true }
        return false
    }

    static func name(_ e: Int32) -> String {
        switch e {
        case EIO: "EIO"
        case ENOSPC: "ENOSPC"
        case EINTR: "EINTR"
        default: "errno \(e)"
        }
    }
}

/// A ``Syscalls`` table that forwards to ``Syscalls/system``, counts the
/// calls while armed, and injects one ``Fault``. It also tracks the
/// descriptors it opened and has not closed.
///
/// A failing `close` still closes (as Linux does): a descriptor is gone
/// after close whatever it returns.
final class FaultyFileSystem: Sendable {
    private struct State {
        var armed = false
        var fault = Fault.none
        var calls: [String] = []
        var injected = 0
        var open: Set<Int32> = []
        var failingOpens: (name: String, errno: Int32)?
    }

    private enum Action { case pass, fail(Int32), shorten }

    private let state = Mutex(State())

    /// A file system whose every call goes through this.
    var fileSystem: FileSystem { FileSystem(syscalls: syscalls) }

    /// Starts counting from 1, with `fault`.
    func arm(_ fault: Fault) {
        state.withLock {
            $0.armed = true
            $0.fault = fault
            $0.calls = []
            $0.injected = 0
        }
    }

    /// Stops counting and injecting; returns the calls made while armed
    /// and how many faults were injected.
    @discardableResult
    func disarm() -> (calls: [String], injected: Int) {
        state.withLock {
            $0.armed = false
            return ($0.calls, $0.injected)
        }
    }

    /// From now on, every `open` of a path whose last component is `name`
    /// fails with `errno` (nil: none does), armed or not: a fault at one
    /// file whatever the calls before it.
    func failOpens(of name: String?, errno: Int32 = EIO) {
        state.withLock { $0.failingOpens = name.map { ($0, errno) } }
    }

    /// Descriptors opened through this and not closed.
    var openDescriptors: Set<Int32> { state.withLock { $0.open } }

    private func next(_ name: String) -> Action {
        state.withLock { s in
            guard s.armed else { return .pass }
            s.calls.append(name)
            let n = s.calls.count
            let action: Action
            switch s.fault {
            case .none: action = .pass
            case .failOnce(let at, let e): action = n == at ? .fail(e) : .pass
            case .failFrom(let at, let e): action = n >= at ? .fail(e) : .pass
            case .interruptOnce(let at): action = n == at ? .fail(EINTR) : .pass
            case .shortWrite(let at): action = n == at && name == "write" ? .shorten : .pass
            }
            if case .pass = action {} else { s.injected += 1 }
            return action
        }
    }

    /// Runs `call` unless the next call is to fail.
    private func perform<R>(_ name: String, failed: R, _ call: () -> R) -> R {
        if case .fail(let e) = next(name) {
            errno = e
            return failed
        }
        return call()
    }

    private var syscalls: Syscalls {
        let real = Syscalls.system
        var s = real
        s.open = { path, flags, mode in
            if let failing = self.state.withLock({ $0.failingOpens }),
               path.split(separator: "/").last.map(String.init) == failing.name {
                errno = failing.errno
                return -1
            }
            return self.perform("open", failed: -1) {
                let fd = real.open(path, flags, mode)
                if fd >= 0 { _ = self.state.withLock { $0.open.insert(fd) } }
                return fd
            }
        }
        s.close = { fd in
            let action = self.next("close")
            let result = real.close(fd)
            _ = self.state.withLock { $0.open.remove(fd) }
            if case .fail(let e) = action {
                errno = e
                return -1
            }
            return result
        }
        s.read = { fd, buffer in self.perform("read", failed: -1) { real.read(fd, buffer) } }
        s.pread = { fd, buffer, offset in self.perform("pread", failed: -1) { real.pread(fd, buffer, offset) } }
        s.pwrite = { fd, bytes, offset in
            switch self.next("pwrite") {
            case .pass:
                return real.pwrite(fd, bytes, offset)
            case .fail(let e):
                errno = e
                return -1
            case .shorten:
                return real.pwrite(fd, UnsafeRawBufferPointer(rebasing: bytes.prefix(max(1, bytes.count / 2))), offset)
            }
        }
        s.write = { fd, bytes in
            switch self.next("write") {
            case .pass:
                return real.write(fd, bytes)
            case .fail(let e):
                errno = e
                return -1
            case .shorten:
                return real.write(fd, UnsafeRawBufferPointer(rebasing: bytes.prefix(max(1, bytes.count / 2))))
            }
        }
        s.fsync = { fd in self.perform("fsync", failed: -1) { real.fsync(fd) } }
        s.syncfs = { fd in self.perform("syncfs", failed: -1) { real.syncfs(fd) } }
        s.flock = { fd, operation in self.perform("flock", failed: -1) { real.flock(fd, operation) } }
        s.fstat = { fd in self.perform("fstat", failed: nil) { real.fstat(fd) } }
        s.lstat = { path in self.perform("lstat", failed: nil) { real.lstat(path) } }
        s.rename = { from, to in self.perform("rename", failed: -1) { real.rename(from, to) } }
        s.renameNoReplace = { from, to in self.perform("renameat2", failed: -1) { real.renameNoReplace(from, to) } }
        s.unlink = { path in self.perform("unlink", failed: -1) { real.unlink(path) } }
        s.mkdir = { path, mode in self.perform("mkdir", failed: -1) { real.mkdir(path, mode) } }
        s.rmdir = { path in self.perform("rmdir", failed: -1) { real.rmdir(path) } }
        s.chmod = { path, mode in self.perform("chmod", failed: -1) { real.chmod(path, mode) } }
        s.listDirectory = { fd in self.perform("listDirectory", failed: nil) { real.listDirectory(fd) } }
        return s
    }
}

/// The faults to try at each call of an operation that made `calls`:
/// ENOSPC and EIO once, EIO from there on, EINTR once, and a short write
/// where the call is a write.
func faultPlan(_ calls: [String]) -> [Fault] {
    calls.indices.flatMap { i -> [Fault] in
        let n = i + 1
        var faults: [Fault] = [.failOnce(at: n, errno: ENOSPC), .failOnce(at: n, errno: EIO),
                               .failFrom(at: n, errno: EIO), .interruptOnce(at: n)]
        if calls[i] == "write" { faults.append(.shortWrite(at: n)) }
        return faults
    }
}

/// Descriptors of this process whose target lies under `directory`.
func descriptors(under directory: String) -> [String] {
    let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
    return fds.compactMap { fd in
        guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + fd),
              target.hasPrefix(directory + "/") || target == directory else { return nil }
        return "\(fd) -> \(target)"
    }
}

/// Files and directories under `directory` whose names mark a write in
/// progress: `<name>.tmp-…` or `.tmp-…`.
func temporaries(under directory: String) -> [String] {
    guard let walker = FileManager.default.enumerator(atPath: directory) else { return [] }
    return walker.compactMap { $0 as? String }.filter { ($0 as NSString).lastPathComponent.contains(".tmp-") }.sorted()
}

/// Copies a directory tree (a prepared store or device) to `destination`.
func copyTree(_ source: String, to destination: String) throws {
    try FileManager.default.createDirectory(atPath: (destination as NSString).deletingLastPathComponent,
                                            withIntermediateDirectories: true)
    try FileManager.default.copyItem(atPath: source, toPath: destination)
}
