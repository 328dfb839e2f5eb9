import ArgumentParser
import FoundationEssentials
import Glibc
import LockerStore
import LockerAgent
import LockerCrypto
import LockerDevice
import LockerFormat
import LockerIO

/// The exit codes, from sysexits(3) where one fits.
enum ExitStatus: Int32 {
    case ok = 0
    case failure = 1
    case usage = 64
    case integrity = 65
    case notFound = 66
    case keyReset = 69
    case alreadyExists = 73
    case protectedDataUnavailable = 75
    case passcode = 77

    static let helpText = """
        Exit codes:
          0   ok
          1   other failure
          64  usage error
          65  integrity failure: stored bytes failed authentication
          66  not found
          69  key reset: the object's class key was replaced by 'locker reset'
          73  already exists
          75  protected data unavailable: unlock, then try again
          77  wrong passcode, or locked out after failed attempts
        """
}

/// A refusal the CLI itself decides, with its exit status.
struct CommandFailure: Error {
    var status: ExitStatus
    var message: String
    var hint: String?

    init(_ status: ExitStatus, _ message: String, hint: String? = nil) {
        self.status = status
        self.message = message
        self.hint = hint
    }

    /// `cannot WHAT: REASON`, the system's reason for `errno`; exit 1.
    /// `inOrder`: WHAT is written in order (standard output, a device, a
    /// FIFO), where a prefix may have gone out, so no hint says nothing
    /// half-written was left.
    static func cannot(_ what: String, _ errno: Int32, inOrder: Bool = false) -> CommandFailure {
        CommandFailure(.failure, "cannot \(what): \(String(cString: strerror(errno)))", hint: inOrder ? nil : hint(forErrno: errno))
    }

    /// The way on from a system call's failure, where the errno alone
    /// says it: a full or read-only file system. Writes are atomic, so
    /// nothing half-written was left to clean up.
    static func hint(forErrno errno: Int32) -> String? {
        switch errno {
        case ENOSPC, EDQUOT:
            return "free some space on that file system, then run the command again; nothing half-written was left"
        case EROFS:
            return "that file system is mounted read-only"
        default:
            return nil
        }
    }
}

/// A local directory's path as ``shown(_:)`` gives it, with a "/" after a
/// last component "." or "..", so that a sentence's full stop after it
/// does not read as part of it ("into ./." rather than "into ..").
func shownDirectory(_ path: String) -> String {
    let last = path.split(separator: "/").last
    return shown(path) + (last == "." || last == ".." ? "/" : "")
}

/// `text` with every control character (see `isControl`) written as an
/// escape (`\n`, `\t`, `\x1b`, `\u{9b}`): a name may hold any of them,
/// and printed raw one would split a line of output or reach the terminal
/// as a command. A backslash is written `\\`, as `ls -b` does, so that a
/// name holding a newline and one holding the two characters `\n` are
/// told apart. The names themselves are stored as given; `--json`
/// escapes them its own way.
func shown(_ text: String) -> String {
    guard text.unicodeScalars.contains(where: { isControl($0) || $0 == "\\" }) else { return text }
    var out = ""
    for scalar in text.unicodeScalars {
        switch scalar {
        case "\\": out += "\\\\"
        case "\n": out += "\\n"
        case "\t": out += "\\t"
        case "\r": out += "\\r"
        case _ where scalar.value < 0x80 && isControl(scalar): out += byteEscape(UInt8(scalar.value))
        case _ where isControl(scalar): out += "\\u{" + String(scalar.value, radix: 16) + "}"
        default: out.unicodeScalars.append(scalar)
        }
    }
    return out
}

/// Bytes that may not be UTF-8 (a local file name) as ``shown(_:)``
/// shows a name: each character that is UTF-8 through `shown`, each
/// other byte as `\xNN`.
func escapedBytes(_ bytes: [UInt8]) -> String {
    var out = ""
    var i = 0
    while i < bytes.count {
        let start = i
        if let length = (1...4).first(where: { start + $0 <= bytes.count && String(validating: bytes[start..<start + $0], as: UTF8.self) != nil }) {
            out += shown(String(decoding: bytes[start..<start + length], as: UTF8.self))
            i += length
        } else {
            out += byteEscape(bytes[start])
            i += 1
        }
    }
    return out
}

/// `\xNN`, lowercase.
private func byteEscape(_ byte: UInt8) -> String {
    "\\x" + (byte < 0x10 ? "0" : "") + String(byte, radix: 16)
}

/// C0, DEL, C1, and the bidirectional overrides and isolates, which
/// reorder what follows them on the line.
private func isControl(_ scalar: Unicode.Scalar) -> Bool {
    let v = scalar.value
    return v < 0x20 || (0x7F...0x9F).contains(v) || (0x202A...0x202E).contains(v) || (0x2066...0x2069).contains(v)
}

/// Turns every error into `locker: error:` and `locker: hint:` lines and
/// an exit code. The only place that does.
enum ErrorPresenter {
    static func present(_ error: any Error) -> Int32 {
        let (status, message, hint) = describe(error)
        if status == .ok {
            // --help and --version arrive as errors; they are output.
            print(message)
            return 0
        }
        var lines = "locker: error: \(shown(message))\n"
        if let hint { lines += "locker: hint: \(shown(hint))\n" }
        writeToStandardError(lines)
        return status.rawValue
    }

    static func describe(_ error: any Error) -> (ExitStatus, String, String?) {
        switch error {
        case let failure as CommandFailure:
            return (failure.status, failure.message, failure.hint)
        case let unreadable as UnreadableSource:
            return (.failure, "cannot read \(unreadable.path): \(String(cString: strerror(unreadable.errno)))", nil)
        case let error as DeviceError:
            return describe(error)
        case let error as AgentError:
            return describe(error)
        case let serving as AgentAlreadyServing:
            return (.failure, "an agent already serves \(shown(serving.devicePath))" + (serving.pid.map { " (pid \($0))" } ?? ""),
                    "commands use it as it is; 'locker reboot' ends it")
        case let error as StoreError:
            return describe(error)
        case let error as IOError:
            return (.failure, error.description, CommandFailure.hint(forErrno: error.errno))
        case is CryptoError, is FormatError:
            return (.integrity, "stored data failed authentication", "run 'locker status' to check the device")
        default:
            let code = Locker.exitCode(for: error)
            let message = Locker.fullMessage(for: error)
            if code == .success { return (.ok, message, nil) }
            return (code == .validationFailure ? .usage : .failure, usageMessage(Locker.message(for: error)), "run 'locker help' for usage")
        }
    }

    /// The argument parser's message without its `Help:` or `Usage:`
    /// lines. What the user typed stays whole: a value may hold a newline,
    /// which ``present(_:)`` shows escaped, like every message.
    static func usageMessage(_ message: String) -> String {
        var text = message
        for marker in ["\nHelp:", "\nUsage:"] {
            if let range = text.firstRange(of: marker) { text = String(text[..<range.lowerBound]) }
        }
        if text.hasPrefix("Error: ") { text = String(text.dropFirst(7)) }
        while text.hasSuffix("\n") { text.removeLast() }
        return text.isEmpty ? "invalid usage" : text
    }

    /// A wiped device's store can never be read again, and `init` refuses
    /// to make a new device over it, so the way on is a store of its own.
    static let wipedHint = "to start again, delete the store's directory, or give 'locker init' a new --store"

    static func describe(_ error: DeviceError) -> (ExitStatus, String, String?) {
        switch error {
        case .notInitialized:
            return (.failure, "no device has been initialized here", "run 'locker init' first")
        case .alreadyInitialized:
            return (.alreadyExists, "a device is already initialized here", "use 'locker reset --yes' for a forgotten passcode, or --device for another device")
        case .wiped:
            return (.failure, "this device was wiped; nothing stored on it can be decrypted", wipedHint)
        case .wipedAfterFailedAttempts(let attempts):
            return (.passcode, "wrong passcode (\(attempts) failed attempt\(attempts == 1 ? "" : "s")): the erase-after limit was reached and the device was wiped; nothing stored on it can be decrypted", wipedHint)
        case .protectedDataUnavailable(let cls):
            return (.protectedDataUnavailable, "protected data unavailable: class \(cls.canonicalName) is locked", "run 'locker unlock', then try again")
        case .keyReset(let cls):
            return (.keyReset, "the \(cls.canonicalName) class key was reset; this object can never be decrypted", "remove such objects with 'locker purge --key-reset'")
        case .wrongPasscode(let attempts, let next):
            var message = "wrong passcode (\(attempts) failed attempt\(attempts == 1 ? "" : "s"))"
            if let next { message += "; next attempt allowed at \(timestamp(next))" }
            return (.passcode, message, nil)
        case .lockedOut(let attempts, let until):
            let wait = max(0, Int((until - Date().timeIntervalSince1970).rounded(.up)))
            return (.passcode, "locked out after \(attempts) failed attempts; next attempt allowed at \(timestamp(until)) (in \(wait) s)", nil)
        case .noPasscode:
            return (.failure, "this device has no passcode", "'locker passwd' sets one, and keeps every object readable")
        case .integrity(let what):
            return (.integrity, "integrity failure: \(what)", nil)
        case .rollback:
            return (.integrity, "integrity failure: the keybag is older than the device record (rolled back)", nil)
        case .notOpen:
            return (.notFound, "the object is not open", "open it with 'locker open'")
        case .tooManyOpenObjects(let limit):
            return (.failure, "too many open objects (\(limit) are open)", "close the objects no longer needed with 'locker close PATH', then try again")
        case .io(let error):
            return (.failure, error.description, nil)
        }
    }

    static func describe(_ error: StoreError) -> (ExitStatus, String, String?) {
        switch error {
        case .invalidPath(let why):
            return (.usage, why, nil)
        case .notFound(let path):
            return (.notFound, "\(path): no such object or directory", "list what exists with 'locker ls'")
        case .alreadyExists(let path):
            return (.alreadyExists, "\(path) already exists", nil)
        case .notADirectory(let path):
            return (.failure, "\(path) is an object, not a directory", nil)
        case .isADirectory(let path):
            return (.failure, "\(path) is a directory", "use -r for directory trees")
        case .directoryNotEmpty(let path):
            return (.failure, "\(path) is not empty", "use 'locker rm -r' to remove it with everything below")
        case .integrity(let path, let what):
            return (.integrity, "integrity failure: \(path): \(what)", "restore the object from a copy, or remove it with 'locker rm'")
        case .noStore(let path):
            return (.notFound, "no store at \(path)", "check --store and $LOCKER_STORE; 'locker put' and 'locker mkdir' create a store")
        case .notAStore(let path):
            var isDirectory = false
            let why = FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) && !isDirectory
                ? "it is not a directory" : "it holds other files"
            return (.failure, "\(path) is not a Locker store: \(why)", "give --store an empty or new directory")
        case .changedMeanwhile(let path, let what):
            return (.failure, "\(path) changed while this command ran: another command \(what)", "run the command again once the other one has ended")
        case .damagedLayout(let path, let what):
            return (.integrity, "the store is damaged: \(path) \(what), where the store keeps its own",
                    "nothing was read, written or removed through it; restore the store from a copy")
        case .storedNotDurable(let path, let reason):
            return (.failure, "cannot make \(path) durable (it was stored, but a crash may lose it): \(reason)",
                    "storing it again once the disk's fault is mended makes sure of it")
        case .objectTooLarge(let maxLength):
            return (.failure, "the object is too large: an object holds at most \(maxLength) bytes; nothing of it was stored", nil)
        case .foreignStore:
            return (.integrity, "the store was not made with this device (or the device was wiped since)", "use the --device it was made with, or a new --store; a store whose device was wiped can only be deleted")
        }
    }

    static func describe(_ error: AgentError) -> (ExitStatus, String, String?) {
        switch error {
        case .notAccepting(let path):
            return (.failure, "the agent is unavailable: the agent at \(path) took no connection within \(AgentClient.connectSeconds) s",
                    "the agent may be stopped or overloaded: try again, or end its process (its pid is in agent.pid in the device directory)")
        case .unavailable(let why):
            return (.failure, "the agent is unavailable: \(why)", "check that the device directory is yours and writable")
        case .protocolViolation:
            return (.failure, "the agent sent a malformed reply", "run 'locker reboot' to restart it")
        case .peerRefused:
            // Not a passcode failure (77): a process of another user
            // listens at this device's socket, and nothing is sent to it.
            return (.failure, "the agent's socket is served by a process of another user; nothing was sent to it",
                    "a device is usable only by the user who owns it; check --device and $LOCKER_DEVICE")
        case .socketPathTooLong(let path):
            return (.usage, "the agent socket path is too long: \(path)", "use a shorter --device path")
        case .invalidArgument(let why):
            return (.usage, why, nil)
        case .remote(let why):
            return (.failure, "the agent failed: \(why)", nil)
        case .tooManyWatchers(let limit):
            return (.failure, "the agent already serves \(limit) watchers", "stop one of the running 'locker watch' commands, then try again")
        }
    }
}
