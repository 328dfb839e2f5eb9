import ArgumentParser
import FoundationEssentials
import Glibc
import LockerAgent
import LockerDevice
import LockerFormat
import LockerIO

// Output rules for every command:
// - Results go to stdout; with --json, exactly one JSON document (watch: one
//   per line).
// - Errors go to stderr as one `locker: error: …` line, then a
//   `locker: hint: …` line when there is a next step. Nothing else.
// - Exit codes are fixed (see `ExitStatus` and docs/cli.md).
// - No secret, passcode or object content is ever printed in an error.

struct Locker: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "locker",
        abstract: "An encrypted object store with Apple-style data protection classes.",
        discussion: ExitStatus.helpText,
        version: "0.1.0",
        subcommands: [
            Init.self, Unlock.self, Lock.self, Reboot.self, Status.self, Passwd.self, Reset.self, Wipe.self,
            Watch.self, Put.self, Get.self, List.self, Stat.self, MakeDirectory.self, SetClass.self, Remove.self,
            Move.self, Open.self, Close.self, Export.self, Purge.self, Verify.self, AgentCommand.self,
        ]
    )
}

extension Locker {
    /// Refuses a first word that names no command, as such: the argument
    /// parser calls it an unexpected argument. A word one or two edits
    /// from a command's name, fewer edits than it has characters, gets
    /// that name as a hint (`x` is two edits from `ls`, but no typo of it).
    static func checkCommandName(_ arguments: [String]) throws {
        guard let word = arguments.first, !word.hasPrefix("-") else { return }
        let names = configuration.subcommands.flatMap { [$0._commandName] + $0.configuration.aliases } + ["help"]
        guard !names.contains(word) else { return }
        let near = names.map { (name: $0, distance: editDistance($0, word)) }.min { $0.distance < $1.distance }
        let hint = near.flatMap { $0.distance <= 2 && $0.distance < word.count ? "did you mean 'locker \($0.name)'?" : nil }
        throw CommandFailure(.usage, "no command named '\(shown(word))'", hint: hint ?? "run 'locker help' for the list of commands")
    }

    /// The Levenshtein distance between `a` and `b`, by Character.
    static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a), b = Array(b)
        var previous = Array(0...b.count)
        for i in a.indices.map({ $0 + 1 }) {
            var current = [i] + Array(repeating: 0, count: b.count)
            for j in stride(from: 1, through: b.count, by: 1) {
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
            }
            previous = current
        }
        return previous[b.count]
    }
}

/// Options every command shares.
struct GlobalOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("The store directory (default: $LOCKER_STORE, else $XDG_DATA_HOME/locker/store).", valueName: "DIR"))
    var store: String?

    @Option(name: .long, help: ArgumentHelp("The device directory (default: $LOCKER_DEVICE, else $XDG_STATE_HOME/locker/device).", valueName: "DIR"))
    var device: String?

    func validate() throws {
        // An empty value (an unset variable) must not mean the default.
        if store?.isEmpty == true { throw ValidationError("--store needs a directory") }
        if device?.isEmpty == true { throw ValidationError("--device needs a directory") }
    }

    /// The device directory, absolute.
    var devicePath: String {
        Self.resolve(device, environment: "LOCKER_DEVICE", xdg: "XDG_STATE_HOME", fallback: ".local/state", leaf: "device")
    }

    /// The store directory, absolute.
    var storePath: String {
        Self.resolve(store, environment: "LOCKER_STORE", xdg: "XDG_DATA_HOME", fallback: ".local/share", leaf: "store")
    }

    private static func resolve(_ explicit: String?, environment: String, xdg: String, fallback: String, leaf: String) -> String {
        let env = ProcessInfo.processInfo.environment
        let chosen: String
        if let explicit, !explicit.isEmpty {
            chosen = explicit
        } else if let value = env[environment], !value.isEmpty {
            chosen = value
        } else if let base = env[xdg], base.hasPrefix("/") {
            chosen = base + "/locker/" + leaf
        } else {
            chosen = (env["HOME"] ?? Self.homeDirectory()) + "/" + fallback + "/locker/" + leaf
        }
        return absolute(chosen)
    }

    /// The user's home directory from the password database, for when
    /// `HOME` is unset; "/" if it names none.
    private static func homeDirectory() -> String {
        guard let entry = getpwuid(getuid()), let directory = entry.pointee.pw_dir else { return "/" }
        return String(cString: directory)
    }

    static func absolute(_ path: String) -> String {
        let joined = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
        return URL(fileURLWithPath: joined).standardizedFileURL.path
    }

    /// Refuses a local DEST in the store or the device directory (or
    /// below a link into either): the plaintext written there would lie
    /// beside the ciphertext, on the disk an attacker with the store or
    /// the device directory has, and the store would take it for damage.
    func refuseDestinationInside(_ destination: String) throws {
        var probe = Self.absolute(destination)
        while probe != "/", !FileManager.default.fileExists(atPath: probe) {
            probe = LocalPath.parent(of: probe)
        }
        if let (directory, what) = containing(probe) {
            throw CommandFailure(.usage, "\(destination) is inside the \(what) \(directory): fetched plaintext must not be written there",
                                 hint: "give a destination outside \(directory)")
        }
    }

    /// Refuses a tree to store (`put -r`'s SRC) that is the store or the
    /// device directory, or lies inside either: the store would take in
    /// its own files, or the device's secret.
    func refuseSourceInside(_ source: String) throws {
        if let (directory, what) = containing(Self.absolute(source)) {
            throw CommandFailure(.usage, "\(source) is inside the \(what) \(directory), which is not stored in the store",
                                 hint: "store a directory outside \(directory)")
        }
    }

    /// The store or the device directory, and what it is called, if the
    /// existing `path` is it or lies inside it (links resolved).
    private func containing(_ path: String) -> (directory: String, what: String)? {
        guard let resolved = Self.resolved(path) else { return nil }
        for (directory, what) in [(storePath, "store"), (devicePath, "device directory")] {
            guard let base = Self.resolved(directory) else { continue }
            if Self.isWithin(resolved, base) { return (directory, what) }
        }
        return nil
    }

    /// The store and the device directory as a tree fetch must never enter
    /// them (``DirectoryFence``): a DEST that holds either (`get -r /
    /// ~`, with the store under `~/.local/share`) must not have fetched
    /// plaintext, or files over the device's own, written into them by
    /// objects whose paths lead there. A directory that does not exist (yet)
    /// is left out: a fetch creates none of its directories at the path
    /// of an existing one.
    func fence() -> DirectoryFence {
        var fenced: [(device: UInt64, inode: UInt64, what: String)] = []
        for (directory, what) in [(storePath, "the store"), (devicePath, "the device directory")] {
            var st = stat()
            // Followed if a link, as the store and device are reached.
            guard stat(directory, &st) == 0 else { continue }
            fenced.append((UInt64(st.st_dev), UInt64(st.st_ino), "\(what) \(shown(directory))"))
        }
        return DirectoryFence(fenced: fenced)
    }

    /// Refuses a device directory and a store of which one is inside the
    /// other (exit 64): the device secret must stay outside the store, and
    /// the store outside the device directory. `init` checks before it
    /// makes either, and every store command before it opens (or makes)
    /// the store.
    func requireApart() throws {
        let device = devicePath, store = storePath
        if Self.isWithin(device, store) || Self.isWithin(store, device) {
            throw CommandFailure(.usage, "the device directory \(device) and the store \(store) must be apart, neither inside the other",
                                 hint: "give --device and --store separate directories")
        }
    }

    /// Whether the absolute path `inner` is `outer` or below it.
    static func isWithin(_ inner: String, _ outer: String) -> Bool {
        inner == outer || inner.hasPrefix(outer == "/" ? "/" : outer + "/")
    }

    /// `path` with every link resolved (realpath(3)), or nil if it
    /// cannot be.
    static func resolved(_ path: String) -> String? {
        guard let pointer = realpath(path, nil) else { return nil }
        defer { free(pointer) }
        return String(cString: pointer)
    }

    /// A client for this device's agent, starting the agent if needed.
    /// Unless `creatingDevice` (`init`), a directory that holds no device
    /// is refused first: a mistyped `--device` must not leave a directory
    /// chain and an agent behind.
    func client(creatingDevice: Bool = false) throws -> AgentClient {
        let path = devicePath
        // A device this user may not look into is an error of its own,
        // not "no device": `init` there would fail the same way.
        let exists: Bool
        do {
            exists = try DeviceDirectory(path: path).recordExists()
        } catch DeviceError.io(let error) {
            throw CommandFailure(.failure, "cannot look into the device directory: \(error)",
                                 hint: "a device is usable only by the user who owns it; check --device and $LOCKER_DEVICE")
        }
        if !creatingDevice, !exists {
            throw CommandFailure(.failure, "no device at \(path)",
                                 hint: "run 'locker init' to create one, or check --device and $LOCKER_DEVICE")
        }
        return try AgentClient(devicePath: path, launcher: Self.agentLauncher(devicePath: path))
    }

    /// How a command starts the agent when none answers: `locker-agent`
    /// from this binary's directory, or else this binary's own `agent`
    /// command, which is also the fallback if `locker-agent` ends at start
    /// with a failure. Both run the same agent; the first maps about a
    /// third less memory for as long as it holds the keys.
    ///
    /// `locker-agent` is taken only if it is a regular file (not a link)
    /// that this user may run, owned by the owner of this binary or by
    /// root, and writable by no one else: in a directory where others may
    /// add files but not replace this one (`/tmp`), a `locker-agent` they
    /// put there, which would receive the passcodes, is not run.
    static func agentLauncher(devicePath: String) -> AgentLauncher {
        let own = executablePath
        let itself = AgentLauncher(executable: own, arguments: ["agent", "--device", devicePath])
        guard let slash = own.lastIndex(of: "/") else { return itself }
        let sibling = String(own[...slash]) + "locker-agent"
        var mine = stat(), theirs = stat()
        guard stat(own, &mine) == 0, lstat(sibling, &theirs) == 0,
              theirs.st_mode & S_IFMT == S_IFREG,
              theirs.st_uid == mine.st_uid || theirs.st_uid == 0,
              theirs.st_mode & (S_IWGRP | S_IWOTH) == 0,
              access(sibling, X_OK) == 0
        else { return itself }
        return AgentLauncher(executable: sibling, arguments: ["--device", devicePath], fallbacks: [itself])
    }

    /// `arguments` (without the program name) with `--store` and
    /// `--device` given before the subcommand moved after it, where every
    /// subcommand takes them: `locker --store DIR ls` means
    /// `locker ls --store DIR`. Anything else is left as it is. Global
    /// options with no subcommand after them are a usage error that says
    /// so (the parser alone would call them unknown).
    static func movedAfterSubcommand(_ arguments: [String]) throws -> [String] {
        var leading: [String] = []
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            if argument == "--store" || argument == "--device" {
                guard index + 1 < arguments.count else {
                    throw CommandFailure(.usage, "missing value for '\(argument) <DIR>'",
                                         hint: "give it a directory and a subcommand: 'locker \(argument) DIR ls'")
                }
                leading += [argument, arguments[index + 1]]
                index += 2
            } else if argument.hasPrefix("--store=") || argument.hasPrefix("--device=") {
                leading.append(argument)
                index += 1
            } else {
                break
            }
        }
        if !leading.isEmpty, index == arguments.count {
            let given = leading.filter { $0.hasPrefix("--") }.map { String($0.prefix { $0 != "=" }) }
            throw CommandFailure(.usage, "no subcommand after \(given.joined(separator: " and "))",
                                 hint: "name one after them, as in 'locker \(given[0]) DIR ls'; 'locker help' lists the subcommands")
        }
        guard !leading.isEmpty else { return arguments }
        // An option where the subcommand should be (`--help`, a typo) is
        // what the parser must judge, without the global options in front.
        if arguments[index].hasPrefix("-") { return Array(arguments[index...]) }
        // `help` takes no options; what it explains does not depend on them.
        if arguments[index] == "help" { return Array(arguments[index...]) }
        return [arguments[index]] + leading + arguments[(index + 1)...]
    }

    static var executablePath: String {
        (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
    }
}

struct JSONOption: ParsableArguments {
    @Flag(name: .long, help: "Print the result as JSON.")
    var json = false
}

/// Prints `value` as one JSON document.
func printJSON(_ value: some Encodable) throws {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
    let data = try encoder.encode(value)
    // write(2), not FileHandle: a reader that went away (`| head`) is an
    // error (EPIPE, SIGPIPE is ignored), not a crash in Foundation.
    fflush(nil)
    try (data + Data("\n".utf8)).withUnsafeBytes { try writeAll(STDOUT_FILENO, $0, path: "standard output") }
}

/// Writes `text` to standard error as it is, ignoring failure: a message
/// has nowhere else to go, and FileHandle's `write` would crash the
/// process on a closed pipe.
func writeToStandardError(_ text: String) {
    Array(text.utf8).withUnsafeBytes { try? FileSystem().writeAll(STDERR_FILENO, $0, path: "standard error") }
}

/// Throws a usage error for a command-line argument that is not UTF-8.
/// Swift's `CommandLine.arguments` would hand it over with replacement
/// characters: a path that names another file, or none, and a store name
/// that is not the one typed.
func checkArgumentsAreUTF8() throws {
    for index in 1..<Int(CommandLine.argc) {
        guard let argument = CommandLine.unsafeArgv[index] else { continue }
        let bytes = Array(UnsafeBufferPointer(start: argument, count: strlen(argument))).map { UInt8(bitPattern: $0) }
        if String(validating: bytes, as: UTF8.self) == nil {
            // The first byte that is not: the longest prefix that is UTF-8
            // ends before it.
            let valid = (0..<bytes.count).last { String(validating: bytes[..<$0], as: UTF8.self) != nil } ?? 0
            let hex = String(bytes[valid], radix: 16)
            throw CommandFailure(.usage, "argument \(index), '\(String(decoding: bytes, as: UTF8.self))', is not UTF-8 (byte \(valid + 1) is 0x\(hex))",
                                 hint: "Locker's paths and names are UTF-8; rename the file ('put -r' of its directory skips it with a warning)")
        }
    }
}

/// Writes out what `print` has buffered; a result that could not be
/// written (a full disk, a reader gone from the pipe) is a failure, exit 1.
func flushStandardOutput() throws {
    do {
        try ProcessOutput.flush()
    } catch {
        throw CommandFailure.cannot("write standard output", error.errno, inOrder: true)
    }
}

/// An ISO 8601 (RFC 3339) time in UTC for seconds since 1970, to the
/// second, the fraction dropped: `2026-11-25T01:51:00Z`.
func timestamp(_ seconds: Double) -> String {
    internetTime.format(Date(timeIntervalSince1970: seconds))
}

// A value made once: an `ISO8601DateFormatter` made per call cost about
// 70 µs, two thirds of the CPU time of `export`'s manifest entry.
private let internetTime = Date.ISO8601FormatStyle()

@main
enum Main {
    static func main() {
        // A write to a closed pipe must be an error, not a silent death.
        signal(SIGPIPE, SIG_IGN)
        // Four malloc arenas at most instead of eight per core: `put -r`'s
        // short-lived reader threads each touched an arena of their own
        // (measured: peak RSS of a `put -r` of 20,000 small files 38.7 MiB
        // → 36.5 MiB, the time the same).
        ProcessMemory.limitMallocArenas(to: 4)
        do {
            try checkArgumentsAreUTF8()
            let arguments = try GlobalOptions.movedAfterSubcommand(Array(CommandLine.arguments.dropFirst()))
            try Locker.checkCommandName(arguments)
            var command = try Locker.parseAsRoot(arguments)
            // Before any other thread exists. The agent takes these
            // signals itself, to wipe its keys and remove its socket.
            if !(command is AgentCommand) { Interruption.install() }
            try command.run()
            try flushStandardOutput()
        } catch {
            // An interrupted command has removed its temporaries and says
            // nothing more: the shell reports the signal.
            if let signal = Interruption.signal { Interruption.end(by: signal) }
            exit(ErrorPresenter.present(error))
        }
        if let signal = Interruption.signal { Interruption.end(by: signal) }
    }
}
