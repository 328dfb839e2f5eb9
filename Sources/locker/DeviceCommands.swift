import ArgumentParser
import FoundationEssentials
import Glibc
import LockerStore
import LockerAgent
import LockerCrypto
import LockerDevice
import LockerFormat
import LockerIO

/// A protection class as typed on the command line: a canonical name, a
/// letter A–D, or `untilFirstAuth`.
struct ClassArgument: ExpressibleByArgument {
    let value: ProtectionClass

    init(_ value: ProtectionClass) { self.value = value }

    init?(argument: String) {
        guard let value = ProtectionClass(name: argument) else { return nil }
        self.value = value
    }

    var defaultValueDescription: String { value.canonicalName }
    static var allValueStrings: [String] { ProtectionClass.allCases.map(\.canonicalName) }

    /// Every spelling, for messages.
    static let spellings = "complete, completeUnlessOpen, completeUntilFirstUserAuthentication, none, A–D or untilFirstAuth"

    /// Parses a `--class` value. The error names every spelling on the
    /// error's one line: the parser's own list names only the canonical
    /// ones, and with the others it would take a line each.
    static func parse(_ text: String) throws -> ClassArgument {
        guard let parsed = ClassArgument(argument: text) else { throw Unknown() }
        return parsed
    }

    private struct Unknown: Error, CustomStringConvertible {
        var description: String { "use \(ClassArgument.spellings)" }
    }
}

struct Init: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Create the device and its keybag, and leave it unlocked.",
        discussion: "Asks for a new passcode on the terminal (twice), or reads one line with --passcode-stdin.")

    @OptionGroup var global: GlobalOptions
    @OptionGroup var noPasscodeArguments: NoPasscodeArguments
    @OptionGroup var output: JSONOption

    @Flag(help: "Create a device without a passcode: locking then changes nothing for data.")
    var noPasscode = false

    @Flag(help: "Read the passcode as one line from standard input.")
    var passcodeStdin = false

    // Unconditional: `--grace -1` is a value out of range, not a missing one.
    @Option(parsing: .unconditional, help: ArgumentHelp("Seconds class A and B keys stay after a lock (0 to 86400).", valueName: "SECONDS"))
    var grace: Int = 10

    @Option(help: ArgumentHelp("The class new objects get when nothing else decides: \(ClassArgument.spellings) (default: completeUntilFirstUserAuthentication).", valueName: "CLASS"),
            completion: .list(ClassArgument.allValueStrings), transform: ClassArgument.parse)
    var defaultClass = ClassArgument(.completeUntilFirstUserAuthentication)

    @Option(parsing: .unconditional, help: ArgumentHelp("Erase the device after N failed passcode attempts (1 to 100).", valueName: "N"))
    var eraseAfter: Int?

    func validate() throws {
        if noPasscode && passcodeStdin { throw ValidationError("--no-passcode and --passcode-stdin exclude each other") }
        if !(0...86_400).contains(grace) { throw ValidationError("--grace must be between 0 and 86400 seconds") }
        if let eraseAfter, !(1...100).contains(eraseAfter) { throw ValidationError("--erase-after must be between 1 and 100") }
        if noPasscode && eraseAfter != nil { throw ValidationError("--erase-after needs a passcode") }
    }

    func run() throws {
        // The device secret stays outside the store (and the store outside
        // the device directory); refused before anything is made.
        try global.requireApart()
        let device = global.devicePath, store = global.storePath
        // Nor is a store put into a directory of other files.
        try Store.checkDirectory(store, create: true)
        // A store left by another device (or by this one before a wipe)
        // could never be read by the new device: every later command would
        // fail on it. Refused before the device is made: here when there is
        // no device yet, below when its agent must say whether it was
        // wiped. (Over a live device, initialize refuses on its own.)
        let foreignStore = CommandFailure(
            .alreadyExists,
            "the store \(global.storePath) holds objects of another device, or of one wiped since; a new device could never read them",
            hint: "delete it ('rm -r \(global.storePath)') if its device was wiped, or give a new --store")
        let fileSystem = FileSystem()
        // The outermost directory each path will make, if any: what a
        // refused init removes.
        func madeFor(_ path: String) throws -> String? {
            var made: String?
            var current = path
            while current != "/", try fileSystem.status(current) == nil {
                made = current
                current = LocalPath.parent(of: current)
            }
            return made
        }
        let newDevice = try madeFor(device)
        let newStore = try madeFor(store)
        if newDevice != nil, Self.holdsObjects(store: store) { throw foreignStore }
        let client = try global.client(creatingDevice: true)
        // A signal while this waits for the passcode ends the process at
        // once (init does not stop at Interruption.check), with the
        // cleanups registered: the same removal as a failure's, on the
        // signal's thread. Registered only while the passcode is read,
        // when this thread does nothing else: a removal that ran while it
        // asked the agent for something would make the client start a
        // new agent, and with it the directories just removed.
        //
        // Once the passcode is read, a signal lets the init finish and
        // report before the process ends by it: the agent may already be
        // making the device, which no removal can undo, and ending at
        // once left a device made with no word said. The init takes part
        // (Interruption.cooperating) before the removal is unregistered,
        // so that no signal falls between the two.
        func guardingPrompt(_ read: () throws -> SecretBytes?, then finish: (SecretBytes?) throws -> Void) throws {
            guard let outermost = newDevice else {
                let passcode = try read()
                return try Interruption.cooperating { try finish(passcode) }
            }
            let token = Interruption.registerCleanup { [fileSystem] in
                guard Self.hasNoDevice(client) else { return }
                Self.remove(device: device, upTo: outermost, agent: client, fileSystem: fileSystem)
            }
            let passcode: SecretBytes?
            do {
                passcode = try read()
            } catch {
                Interruption.unregisterCleanup(token)
                throw error
            }
            try Interruption.cooperating {
                Interruption.unregisterCleanup(token)
                try finish(passcode)
            }
        }
        var initializedHere = false
        do {
            try initialize(client, refusing: foreignStore, readingPasscode: guardingPrompt) { initializedHere = true }
        } catch DeviceError.alreadyInitialized {
            // Another init made the device since these paths were found
            // missing: the directories, the agent and the store are its.
            throw DeviceError.alreadyInitialized
        } catch {
            // A refused init leaves nothing behind that it made: the
            // agent it started, the device directory, the store directory.
            // But the passcode prompt waits for as long as the user takes,
            // and meanwhile another init may have made the device through
            // the same agent, with a store and objects: then nothing here
            // is this command's to remove. Nor is anything put meanwhile
            // in the directories made on the way, which go only if empty.
            let deviceIsOurs = initializedHere || Self.hasNoDevice(client)
            if let newDevice, deviceIsOurs {
                Self.remove(device: device, upTo: newDevice, agent: client, fileSystem: fileSystem)
            }
            // The store is made only once the device is initialized.
            if let newStore, initializedHere {
                try? fileSystem.removeTree(store)
                Self.removeEmptyDirectories(above: store, upTo: newStore, fileSystem: fileSystem)
            }
            throw error
        }
    }

    /// Stops the agent, removes the device directory `device`, and the
    /// directories above it up to `outermost` while they are empty.
    static func remove(device: String, upTo outermost: String, agent client: AgentClient, fileSystem: FileSystem) {
        if let pid = try? client.agentProcessID() { stop(agent: pid) }
        try? fileSystem.removeTree(device)
        removeEmptyDirectories(above: device, upTo: outermost, fileSystem: fileSystem)
    }

    /// Whether the agent says no device has been initialized at its
    /// directory. Any other answer, or none, counts as a device: what is
    /// not known to be this command's is left alone.
    static func hasNoDevice(_ client: AgentClient) -> Bool {
        do {
            _ = try client.status()
            return false
        } catch DeviceError.notInitialized {
            return true
        } catch {
            return false
        }
    }

    /// Removes the directories from `path`'s parent up to `outermost`
    /// (one of them, or `path` itself), each only while it is empty.
    static func removeEmptyDirectories(above path: String, upTo outermost: String, fileSystem: FileSystem) {
        guard path != outermost else { return }
        var current = LocalPath.parent(of: path)
        while current.count >= outermost.count, current != "/" {
            guard (try? fileSystem.removeDirectory(current)) != nil else { return }
            if current == outermost { return }
            current = LocalPath.parent(of: current)
        }
    }

    /// Stops an agent this command started (SIGTERM: it wipes its keys
    /// and removes its socket), waiting up to two seconds for it to go.
    static func stop(agent pid: Int32) {
        guard kill(pid, SIGTERM) == 0 else { return }
        for _ in 0..<200 where kill(pid, 0) == 0 { usleep(10_000) }
    }

    /// Initializes the device and makes the store; `initialized` is called
    /// once the device is initialized, before the store is made.
    /// `readingPasscode` reads the passcode with its first closure (nil
    /// with `--no-passcode`) and hands it to its second, which does the
    /// rest.
    private func initialize(_ client: AgentClient, refusing foreignStore: CommandFailure,
                            readingPasscode: (() throws -> SecretBytes?, (SecretBytes?) throws -> Void) throws -> Void,
                            initialized: @escaping () -> Void) throws {
        let live: Bool
        do {
            live = try client.status().state != .wiped
        } catch DeviceError.notInitialized {
            live = false
        }
        if !live, Self.holdsObjects(store: global.storePath) { throw foreignStore }
        try readingPasscode({
            noPasscode ? nil
                : try PasscodeInput(fromStandardInput: passcodeStdin).read(prompt: "New passcode: ", confirm: true, expected: .initPasscode)
        }) { passcode in
            try client.initialize(passcode: passcode, options: Device.Options(
                graceSeconds: UInt32(grace), eraseAfter: UInt8(eraseAfter ?? 0), defaultClass: defaultClass.value,
                passcodeCost: .calibrated(milliseconds: 100)))
            initialized()
            // The store's layout and root record, so that the commands that
            // only read find a store (they never make one).
            _ = try Store(path: global.storePath, keys: client, create: true)
            let status = try client.status()
            if output.json {
                try printJSON(StatusReport(status, devicePath: global.devicePath, storePath: global.storePath))
            } else {
                print("Initialized device at \(global.devicePath)")
                print("Store: \(global.storePath)")
                print(noPasscode ? "No passcode: locking changes nothing for data." : "Passcode set; grace period \(grace) s.")
                print("Default class: \(defaultClass.value.canonicalName)")
                print("State: \(status.state.rawValue)")
            }
        }
    }
}

struct Unlock: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Unlock the device with its passcode.")

    @OptionGroup var global: GlobalOptions
    @OptionGroup var noPasscodeArguments: NoPasscodeArguments
    @OptionGroup var output: JSONOption

    @Flag(help: "Read the passcode as one line from standard input.")
    var passcodeStdin = false

    func run() throws {
        let client = try global.client()
        let before = try client.status()
        if before.state == .wiped { throw DeviceError.wiped }
        if before.passcodeSet {
            let passcode = try PasscodeInput(fromStandardInput: passcodeStdin).read(prompt: "Passcode: ")
            try client.unlock(passcode: passcode)
        } else {
            // Without a passcode, the empty one ends a lock; nothing is read.
            try client.unlock(passcode: SecretBytes(copying: []))
        }
        let status = try client.status()
        if output.json {
            try printJSON(StatusReport(status, devicePath: global.devicePath, storePath: global.storePath))
        } else if before.passcodeSet {
            print("Unlocked. Readable: \(classList(status.readableClasses)).")
        } else {
            print("This device has no passcode; its data is always available.")
        }
    }
}

struct Lock: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Lock the device. Class A and B keys go when the grace period ends.")

    @OptionGroup var global: GlobalOptions
    @OptionGroup var output: JSONOption

    @Flag(help: "Skip the grace period: evict class A and B keys at once.")
    var now = false

    func run() throws {
        let client = try global.client()
        try client.lock(immediately: now)
        let status = try client.status()
        // The device does nothing on a wiped device; saying "Locked" would
        // claim otherwise.
        if status.state == .wiped { throw DeviceError.wiped }
        if output.json {
            try printJSON(StatusReport(status, devicePath: global.devicePath, storePath: global.storePath))
            return
        }
        if !status.passcodeSet {
            print("Locked. This device has no passcode, so locking changes nothing for data.")
        } else if let grace = status.graceRemaining {
            print("Locking: class complete and completeUnlessOpen keys are discarded in \(Int(grace.rounded(.up))) s.")
        } else {
            print("Locked. Readable: \(classList(status.readableClasses)).")
        }
        if !status.openObjects.isEmpty {
            print("Still open:")
            for object in status.openObjects { print("  \(object.id)  \(object.protection)") }
        }
    }
}

struct Reboot: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Restart the device: every key in memory is wiped; it comes back before first unlock.")

    @OptionGroup var global: GlobalOptions
    @OptionGroup var output: JSONOption

    func run() throws {
        let client = try global.client()
        try client.reboot()
        if output.json {
            try printJSON(StatusReport(try client.status(), devicePath: global.devicePath, storePath: global.storePath))
        } else {
            print("Rebooted. Every key in memory was wiped.")
        }
    }
}

struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Show the device state and which classes are usable.")

    @OptionGroup var global: GlobalOptions
    @OptionGroup var output: JSONOption

    func run() throws {
        let client = try global.client()
        let status = try client.status()
        let report = StatusReport(status, devicePath: global.devicePath, storePath: global.storePath)
        if output.json {
            try printJSON(report)
            return
        }
        print("Device:            \(report.device)")
        print("State:             \(report.state)")
        if status.state == .wiped {
            print("Passcode:          - (wiped)")
        } else if !report.passcodeSet {
            print("Passcode:          none (locking changes nothing for data)")
        } else {
            print("Passcode:          set")
        }
        print("Readable classes:  \(classList(report.readableClasses))")
        print("Creatable classes: \(classList(report.creatableClasses))")
        if let grace = report.graceRemainingSeconds { print("Grace left:        \(fixedPoint(grace, decimals: 1)) s") }
        print("Failed attempts:   \(report.failedAttempts)")
        if let next = report.nextAttemptAllowedAt { print("Next attempt at:   \(next)") }
        if let erase = report.eraseAfter { print("Erase after:       \(erase) failed attempts") }
        // The store's default, which a directory's own default (the root's
        // too) overrides: `stat DIR` says what new objects there get.
        print("Default class:     \(report.defaultClass) (where no directory sets one)")
        print("Key generation:    \(report.keyGeneration)")
        print("Open objects:      \(report.openObjects.isEmpty ? "none" : "")")
        for object in report.openObjects { print("  \(object.id)  \(object.protection)") }
    }
}

/// Class names with their letters, e.g. "none (D)", so that the class
/// called `none` is not read as "no class".
func classList(_ names: [String]) -> String {
    guard !names.isEmpty else { return "no class" }
    return names.map { name in ProtectionClass(name: name).map { "\(name) (\($0.letter))" } ?? name }
        .joined(separator: ", ")
}

/// What `status --json` prints.
struct StatusReport: Encodable {
    var device: String
    var store: String
    var state: String
    var passcodeSet: Bool
    var isProtectedDataAvailable: Bool
    var readableClasses: [String]
    var creatableClasses: [String]
    var graceSeconds: Int
    var graceRemainingSeconds: Double?
    var failedAttempts: Int
    var nextAttemptAllowedAt: String?
    var eraseAfter: Int?
    var defaultClass: String
    var keyGeneration: Int
    var openObjects: [DeviceStatus.OpenObject]

    init(_ status: DeviceStatus, devicePath: String, storePath: String) {
        device = devicePath
        store = storePath
        state = status.state.rawValue
        passcodeSet = status.passcodeSet
        isProtectedDataAvailable = status.isProtectedDataAvailable
        readableClasses = status.readableClasses
        creatableClasses = status.creatableClasses
        graceSeconds = status.graceSeconds
        graceRemainingSeconds = status.graceRemaining
        failedAttempts = status.failedAttempts
        nextAttemptAllowedAt = status.nextAttemptAllowedAt.map(timestamp)
        eraseAfter = status.eraseAfter
        defaultClass = status.defaultClass
        keyGeneration = status.keyGeneration
        openObjects = status.openObjects
    }

    // Optional fields are written as null rather than left out, so that
    // scripts can rely on every key being present.
    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(device, forKey: .device)
        try c.encode(store, forKey: .store)
        try c.encode(state, forKey: .state)
        try c.encode(passcodeSet, forKey: .passcodeSet)
        try c.encode(isProtectedDataAvailable, forKey: .isProtectedDataAvailable)
        try c.encode(readableClasses, forKey: .readableClasses)
        try c.encode(creatableClasses, forKey: .creatableClasses)
        try c.encode(graceSeconds, forKey: .graceSeconds)
        try c.encode(graceRemainingSeconds, forKey: .graceRemainingSeconds)
        try c.encode(failedAttempts, forKey: .failedAttempts)
        try c.encode(nextAttemptAllowedAt, forKey: .nextAttemptAllowedAt)
        try c.encode(eraseAfter, forKey: .eraseAfter)
        try c.encode(defaultClass, forKey: .defaultClass)
        try c.encode(keyGeneration, forKey: .keyGeneration)
        try c.encode(openObjects, forKey: .openObjects)
    }

    enum CodingKeys: String, CodingKey {
        case device, store, state, passcodeSet, isProtectedDataAvailable, readableClasses, creatableClasses
        case graceSeconds, graceRemainingSeconds, failedAttempts, nextAttemptAllowedAt, eraseAfter
        case defaultClass, keyGeneration, openObjects
    }
}

struct Passwd: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Change the passcode, or set one on a device without. Rewraps the class keys only; no object is rewritten.",
        discussion: "Prompts for the current and the new passcode on a terminal; otherwise, or with --passcode-stdin, reads them as two lines on standard input. On a device without a passcode, asks only for the new one (one line on standard input), and every object stays readable.")

    @OptionGroup var global: GlobalOptions
    @OptionGroup var noPasscodeArguments: NoPasscodeArguments

    @OptionGroup var output: JSONOption

    @Flag(help: "Read the passcodes as lines from standard input, even from a terminal.")
    var passcodeStdin = false

    func run() throws {
        let client = try global.client()
        let input = PasscodeInput(fromStandardInput: passcodeStdin)
        // A device without a passcode gets its first one; its objects stay
        // readable (a reset would make A, B and C unreadable).
        let first = try !client.status().passcodeSet
        let old = first ? SecretBytes(copying: []) : try input.read(prompt: "Current passcode: ", expected: .passwd(new: false))
        let new = try input.read(prompt: "New passcode: ", confirm: true,
                                 expected: first ? .newPasscode : .passwd(new: true))
        try client.changePasscode(old: old, new: new)
        if output.json {
            try printJSON(StatusReport(try client.status(), devicePath: global.devicePath, storePath: global.storePath))
        } else {
            print(first ? "Passcode set; locking now protects classes A, B and C." : "Passcode changed.")
        }
    }
}

struct Reset: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "For a forgotten passcode: new class A, B and C keys under a new passcode. Class D survives.",
        discussion: "Objects of classes A, B and C made before the reset can never be read again; they fail with exit code 69 until purged. Prompts for the new passcode on a terminal (twice); otherwise, or with --passcode-stdin, reads one line from standard input.")

    @OptionGroup var global: GlobalOptions
    @OptionGroup var noPasscodeArguments: NoPasscodeArguments

    @OptionGroup var output: JSONOption

    @Flag(help: "Confirm that every class A, B and C object stored so far becomes unreadable.")
    var yes = false

    @Flag(help: "Read the new passcode as one line from standard input, even from a terminal.")
    var passcodeStdin = false

    func validate() throws {
        // As `wipe`: what it destroys cannot be had back, so it is not done
        // on a mistyped or half-remembered command.
        guard yes else {
            throw ValidationError("reset makes every class A, B and C object stored so far unreadable for good; pass --yes to confirm")
        }
    }

    func run() throws {
        let client = try global.client()
        // Asked before the prompt, so that nobody types a new passcode twice
        // only to be refused; the device refuses again itself.
        let before = try client.status()
        if before.state == .wiped { throw DeviceError.wiped }
        guard before.passcodeSet else {
            throw CommandFailure(.failure, "this device has no passcode, so there is none to reset; reset would only make class A, B and C objects unreadable",
                                 hint: "'locker passwd' sets a passcode and keeps every object readable; 'locker wipe --yes' erases everything")
        }
        let passcode = try PasscodeInput(fromStandardInput: passcodeStdin)
            .read(prompt: "New passcode: ", confirm: true, expected: .newPasscode)
        try client.reset(newPasscode: passcode)
        let status = try client.status()
        if output.json {
            try printJSON(StatusReport(status, devicePath: global.devicePath, storePath: global.storePath))
        } else {
            print("Reset: class keys are now generation \(status.keyGeneration). Older class A, B and C objects are unreadable.")
        }
    }
}

extension Init {
    /// Whether the store directory at `path` has a namespace or data files.
    static func holdsObjects(store path: String) -> Bool {
        let files = FileManager.default
        let data = (try? files.contentsOfDirectory(atPath: path + "/data")) ?? []
        return files.fileExists(atPath: path + "/ns/.dir") || !data.isEmpty
    }
}

struct Wipe: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Crypto-erase the device: destroy the effaceable key and the keybag. Nothing can be decrypted afterwards.")

    @OptionGroup var global: GlobalOptions

    @OptionGroup var output: JSONOption

    @Flag(help: "Confirm that every object on this device becomes unreadable.")
    var yes = false

    func validate() throws {
        guard yes else {
            throw ValidationError("wipe destroys every key for good; pass --yes to confirm")
        }
    }

    func run() throws {
        let client = try global.client()
        try client.wipe()
        if output.json {
            try printJSON(StatusReport(try client.status(), devicePath: global.devicePath, storePath: global.storePath))
            return
        }
        print("Wiped. Nothing stored under this device can be decrypted again.")
        if Init.holdsObjects(store: global.storePath) {
            print("The store \(global.storePath) can only be deleted now ('rm -r \(global.storePath)'); 'locker init' makes a new device and refuses to reuse it.")
        }
    }
}

struct Watch: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Print protection events as they happen, until interrupted.")

    @OptionGroup var global: GlobalOptions
    @OptionGroup var output: JSONOption

    func run() throws {
        let client = try global.client()
        var failure: (any Error)?
        try client.watch { event in
            let now = timestamp(Date().timeIntervalSince1970)
            if output.json {
                print("{\"event\":\"\(event.rawValue)\",\"time\":\"\(now)\"}")
            } else {
                print("\(now) \(event.rawValue)")
            }
            // A reader that went away ends the watch with an error.
            do { try flushStandardOutput() } catch { failure = error }
            return failure == nil
        }
        if let failure { throw failure }
    }
}

struct AgentCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "agent",
        abstract: "Run the key agent for a device in the foreground.",
        discussion: "Commands start the agent on their own when none answers; running it by hand is rarely needed. It holds the class keys in memory until 'locker reboot'.")

    @OptionGroup var global: GlobalOptions

    func run() throws {
        try AgentServer.run(devicePath: global.devicePath)
    }
}
