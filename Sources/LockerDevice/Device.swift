public import LockerCrypto
public import LockerFormat
internal import LockerIO
internal import Synchronization
#if canImport(Glibc)
internal import Glibc
#endif

/// The simulated device: its keybag, its state, and the class keys it holds
/// in each state.
///
/// One `Device` runs inside the agent for the CLI, or inside an app's own
/// process (the embedded mode). It is safe to call from several threads.
///
/// Keys held per state follow the protection semantics (docs/architecture.md): before first unlock only
/// D; unlocked and locking all; locked C and D. Without a passcode every key
/// is held in every state but wiped. Class keys never leave this type;
/// callers get file keys, one at a time, when the class allows it now.
public final class Device: @unchecked Sendable {
    /// Options fixed at `init`.
    public struct Options: Sendable {
        public var graceSeconds: UInt32
        public var eraseAfter: UInt8
        public var defaultClass: ProtectionClass
        public var passcodeCost: PasscodeCost

        public init(
            graceSeconds: UInt32 = 10, eraseAfter: UInt8 = 0,
            defaultClass: ProtectionClass = .completeUntilFirstUserAuthentication,
            passcodeCost: PasscodeCost = .calibrated(milliseconds: 100)
        ) {
            self.graceSeconds = graceSeconds
            self.eraseAfter = eraseAfter
            self.defaultClass = defaultClass
            self.passcodeCost = passcodeCost
        }

        /// The fixed passcode costs (log2 of scrypt's N, at r = 8, p = 1)
        /// a device takes: the keybag's floor, up to the largest N whose
        /// memory fits under `PasswordKDF.scryptMemoryLimit` (2^19 needs
        /// 512 MiB; 2^20 needs just over 1 GiB).
        public static let logNRange: ClosedRange<UInt8> = Keybag.PasscodeKDF.logNRange.lowerBound...19
        /// The calibration targets a device takes, in milliseconds.
        public static let calibrationMilliseconds: ClosedRange<Int> = 1...10_000

        /// Checks every option against what a device can be made with.
        /// Throws `FormatError.invalidField` naming the first one out of
        /// range: `"grace"` (over `Keybag.maxGraceSeconds`), `"erase after"`
        /// (over `Keybag.maxEraseAfter`) or `"passcode cost"` (outside
        /// ``logNRange`` or ``calibrationMilliseconds``).
        public func validate() throws {
            guard graceSeconds <= Keybag.maxGraceSeconds else { throw FormatError.invalidField("grace") }
            guard eraseAfter <= Keybag.maxEraseAfter else { throw FormatError.invalidField("erase after") }
            try Self.validate(passcodeCost)
        }

        /// Throws `FormatError.invalidField("passcode cost")` for a cost
        /// outside ``logNRange`` or ``calibrationMilliseconds``.
        public static func validate(_ cost: PasscodeCost) throws {
            switch cost {
            case .calibrated(let milliseconds):
                guard calibrationMilliseconds.contains(milliseconds) else { throw FormatError.invalidField("passcode cost") }
            case .fixed(let logN):
                guard logNRange.contains(logN) else { throw FormatError.invalidField("passcode cost") }
            }
        }
    }

    private struct OpenObject {
        let protectionClass: ProtectionClass
        let fileKey: SecretBytes
    }

    /// The most objects open at once. Each holds its file key in locked
    /// memory (beyond the secure heap, a page of its own), and `status`
    /// lists every one, so the table is bounded.
    public static let maxOpenObjects = 4096

    public let directory: DeviceDirectory
    private let clock: any DeviceClock
    private let passcodeCost: PasscodeCost
    private let lock = Lock()
    /// Subscribers and the events waiting to reach them. Posting only
    /// queues under `lock`; delivery happens after `lock` is released, under
    /// `delivery`, so that an event never reaches a stream while the device
    /// lock is held. (A stream's consumer being cancelled runs its
    /// termination handler under the runtime's task lock; yielding under
    /// the device lock while that handler waits for it deadlocked.)
    private let eventQueue = Mutex(EventQueue())
    /// Serializes delivery, so subscribers see events in the order the
    /// transitions happened.
    private let delivery = Lock()

    private struct EventQueue {
        var subscribers: [UInt64: AsyncStream<ProtectionEvent>.Continuation] = [:]
        /// The key the next subscriber gets.
        var nextSubscriber: UInt64 = 0
        var pending: [ProtectionEvent] = []
    }

    // Everything below is guarded by `lock`.
    private var keys: DeviceKeys
    private var keybag: Keybag?
    private var currentState: DeviceState
    /// When the grace period ends, on the clock's ``DeviceClock/elapsed()``.
    private var graceDeadline: Double?
    private var classKeys: [ProtectionClass: SecretBytes] = [:]
    private var openObjects: [String: OpenObject] = [:]

    // MARK: Life cycle

    private init(directory: DeviceDirectory, clock: any DeviceClock, passcodeCost: PasscodeCost,
                 keys: DeviceKeys, keybag: Keybag?, state: DeviceState) {
        self.directory = directory
        self.clock = clock
        self.passcodeCost = passcodeCost
        self.keys = keys
        self.keybag = keybag
        self.currentState = state
    }

    /// Creates a device in `directory` and leaves it unlocked. A `nil`
    /// passcode makes a device without one. Throws
    /// ``DeviceError/alreadyInitialized`` if a live device is there; a wiped
    /// one is replaced. Options out of range throw as
    /// ``Options/validate()`` does, before anything is written.
    public static func initialize(
        at directory: DeviceDirectory, passcode: SecretBytes?, options: Options = Options(),
        clock: any DeviceClock = SystemClock()
    ) throws -> Device {
        // The keybag would refuse them too, but only once `uid` and
        // `effaceable` are written.
        try options.validate()
        try directory.prepare()
        let uid = try directory.loadUID(create: true)
        let uidOnly = try DeviceKeys(uid: uid, effaceable: nil)
        if try directory.recordExists() {
            let record = try directory.readRecord(macKey: uidOnly.recordMACKey)
            guard record.wiped else { throw DeviceError.alreadyInitialized }
        }
        let effaceable = try SecretBytes(randomCount: 32)
        let keys = try DeviceKeys(uid: uid, effaceable: effaceable)

        let kdf = try Keybag.PasscodeKDF(logN: calibratedLogN(options.passcodeCost), r: 8, p: 1,
                                         salt: SecureRandom.bytes(32))
        let passcodeKey = try derivePasscodeKey(passcode, kdf: kdf, keys: keys)
        var classKeys: [ProtectionClass: SecretBytes] = [:]
        var entries: [Keybag.Entry] = []
        for cls in ProtectionClass.allCases {
            let (key, entry) = try makeClassKey(cls, generation: 1, passcodeKey: passcodeKey, keys: keys)
            classKeys[cls] = key
            entries.append(entry)
        }
        let keybag = try Keybag(
            uuid: SecureRandom.bytes(16), generation: 1, classKeyGeneration: 1, hasPasscode: passcode != nil,
            kdf: kdf, graceSeconds: options.graceSeconds, eraseAfter: options.eraseAfter,
            defaultClass: options.defaultClass, entries: entries)
        // Order matters for crash safety: the effaceable key and keybag
        // first, the record (which marks the device as present) last.
        try directory.writeEffaceable(effaceable)
        try directory.writeKeybag(keybag.sealed(with: keys.keybagSealKey!))
        try directory.writeRecord(DeviceRecord(keybagGeneration: keybag.generation), macKey: keys.recordMACKey)

        let device = Device(directory: directory, clock: clock, passcodeCost: options.passcodeCost,
                            keys: keys, keybag: keybag, state: .unlocked)
        device.classKeys = classKeys
        return device
    }

    /// Boots the device in `directory`: before first unlock, holding only
    /// class D, or unlocked if it has no passcode. A wiped device boots
    /// into ``DeviceState/wiped``. `passcodeCost` is the cost of the
    /// passcodes it sets from now on; one outside what a device takes
    /// throws `FormatError.invalidField("passcode cost")` before anything
    /// is read (``Options/validate(_:)``).
    public static func boot(
        at directory: DeviceDirectory, clock: any DeviceClock = SystemClock(),
        passcodeCost: PasscodeCost = .calibrated(milliseconds: 100)
    ) throws -> Device {
        // Checked here rather than at the passcode change: a calibration
        // target of 0 ms made that change trap (log2 of 0).
        try Options.validate(passcodeCost)
        guard try directory.recordExists() else { throw DeviceError.notInitialized }
        // The directory holds the device secret: keep it private even if
        // its mode was loosened since init.
        try directory.prepare()
        directory.removeStaleTemporaries()
        let uid = try directory.loadUID(create: false)
        let uidOnly = try DeviceKeys(uid: uid, effaceable: nil)
        var record = try directory.readRecord(macKey: uidOnly.recordMACKey)
        if record.wiped {
            return Device(directory: directory, clock: clock, passcodeCost: passcodeCost, keys: uidOnly,
                          keybag: nil, state: .wiped)
        }
        let keys = try DeviceKeys(uid: uid, effaceable: directory.loadEffaceable())
        let keybag: Keybag
        do {
            keybag = try Keybag.open(directory.readKeybag(), with: keys.keybagSealKey!)
        } catch let error as DeviceError {
            throw error
        } catch {
            throw DeviceError.integrity("keybag failed authentication")
        }
        // A keybag write lands before the record's; a crash between them
        // leaves the keybag one generation ahead, which is completed here.
        // Anything older is a rollback.
        // Generations come from authenticated files, but never trap on
        // them: one at the top of the range is damage, not a crash.
        guard record.keybagGeneration < UInt64.max, keybag.generation < UInt64.max else {
            throw DeviceError.integrity("keybag generation failed authentication")
        }
        if keybag.generation == record.keybagGeneration + 1 {
            record.keybagGeneration = keybag.generation
            try directory.writeRecord(record, macKey: keys.recordMACKey)
        } else if keybag.generation < record.keybagGeneration {
            throw DeviceError.rollback
        } else if keybag.generation != record.keybagGeneration {
            throw DeviceError.integrity("keybag generation failed authentication")
        }
        let device = Device(directory: directory, clock: clock, passcodeCost: passcodeCost, keys: keys,
                            keybag: keybag, state: .beforeFirstUnlock)
        let dEntry = keybag.entry(for: .none)
        device.classKeys[.none] = try unwrapClassKey(dEntry, kek: keys.classDKEK)
        if !keybag.hasPasscode {
            try device.unwrapPasscodeClasses(passcodeKey: derivePasscodeKey(nil, kdf: keybag.kdf, keys: keys), keybag: keybag)
            device.currentState = .unlocked
        }
        return device
    }

    /// Ends this boot: every key in memory is wiped. The device object is
    /// unusable afterwards.
    public func shutdown() {
        lock.withLock {
            classKeys.removeAll()
            openObjects.removeAll()
        }
        finishEvents()
    }

    /// Ends every event stream: no event follows a shutdown or a wipe.
    /// Events still queued are delivered first: another thread's
    /// ``deliverEvents()`` that took an empty batch before a wipe posted
    /// its event, and saw the device wiped after, comes here while that
    /// event waits (it was lost, and a watcher missed the wipe's event).
    private func finishEvents() {
        let continuations = delivery.withLock {
            let (batch, targets) = eventQueue.withLock { queue in
                defer { queue = EventQueue() }
                return (queue.pending, Array(queue.subscribers.values))
            }
            for event in batch {
                for continuation in targets { continuation.yield(event) }
            }
            return targets
        }
        // Outside every lock: finish() runs the stream's onTermination at
        // once, and that takes `eventQueue`.
        for continuation in continuations { continuation.finish() }
    }

    // MARK: State

    /// The current state, after applying any grace expiry.
    public var state: DeviceState {
        lock.withLock {
            expireGrace()
            return currentState
        }
    }

    /// True while class A data is available, as iOS's
    /// `isProtectedDataAvailable`.
    public var isProtectedDataAvailable: Bool {
        lock.withLock {
            expireGrace()
            return classKeys[.complete] != nil
        }
    }

    /// When the grace period ends, if a lock is in progress.
    public var graceEndsAt: Double? {
        lock.withLock {
            expireGrace()
            // The deadline is on the elapsed clock; told in the wall clock's time.
            return currentState == .locking ? graceDeadline.map { clock.now() + ($0 - clock.elapsed()) } : nil
        }
    }

    /// A snapshot for `status`.
    public func status() throws -> DeviceStatus {
        try lock.withLock {
            expireGrace()
            let now = clock.now()
            var attempts = 0
            var next: Double?
            if currentState != .wiped {
                // A status answers even where the record cannot be
                // written back (a full or read-only disk).
                let record = try readRecordSettlingTime(now: now, mustWrite: false)
                attempts = Int(record.failedAttempts)
                if let t = PasscodePolicy.nextAttempt(failedAttempts: attempts, lastFailure: Double(record.lastFailureTime)),
                   t > now {
                    next = t
                }
            }
            return DeviceStatus(
                state: currentState,
                passcodeSet: keybag?.hasPasscode ?? false,
                readableClasses: ProtectionClass.allCases.filter { canRead($0) }.map(\.canonicalName),
                creatableClasses: ProtectionClass.allCases.filter { canCreate($0) }.map(\.canonicalName),
                graceRemaining: currentState == .locking ? graceDeadline.map { max(0, $0 - clock.elapsed()) } ?? 0 : nil,
                graceSeconds: Int(keybag?.graceSeconds ?? 0),
                failedAttempts: attempts,
                nextAttemptAllowedAt: next,
                eraseAfter: keybag.flatMap { $0.eraseAfter > 0 ? Int($0.eraseAfter) : nil },
                keyGeneration: Int(keybag?.classKeyGeneration ?? 0),
                defaultClass: (keybag?.defaultClass ?? .completeUntilFirstUserAuthentication).canonicalName,
                openObjects: openObjects.map { .init(id: $0.key, protection: $0.value.protectionClass.canonicalName) }
                    .sorted { $0.id < $1.id },
                isProtectedDataAvailable: classKeys[.complete] != nil)
        }
    }

    /// The store's default class, set at `init`.
    public var defaultClass: ProtectionClass {
        lock.withLock { keybag?.defaultClass ?? .completeUntilFirstUserAuthentication }
    }

    /// The key that encrypts names and metadata in the store. Available in
    /// every state but wiped.
    public func metadataKey() throws -> SecretBytes {
        try lock.withLock {
            guard currentState != .wiped, let key = keys.metadataKey else { throw DeviceError.wiped }
            return key
        }
    }

    /// Protection events, from now on, until shutdown or a wipe (after
    /// which none can come: the stream of a wiped device ends at once).
    public func events() -> AsyncStream<ProtectionEvent> {
        let (stream, continuation) = AsyncStream<ProtectionEvent>.makeStream(bufferingPolicy: .bufferingNewest(64))
        let id = eventQueue.withLock { queue in
            defer { queue.nextSubscriber += 1 }
            return queue.nextSubscriber
        }
        continuation.onTermination = { [weak self] _ in
            guard let self else { return }
            _ = self.eventQueue.withLock { $0.subscribers.removeValue(forKey: id) }
        }
        eventQueue.withLock { $0.subscribers[id] = continuation }
        // After subscribing: a wipe from now on finishes it as well.
        if state == .wiped { continuation.finish() }
        return stream
    }

    /// Queues `event`; called with `lock` held. ``deliverEvents()`` sends
    /// it once `lock` is released.
    private func post(_ event: ProtectionEvent) {
        eventQueue.withLock { queue in
            if !queue.subscribers.isEmpty { queue.pending.append(event) }
        }
    }

    /// Sends queued events to every subscriber. Never called with `lock`
    /// held.
    private func deliverEvents() {
        // A wipe's last event is delivered, then every stream ends.
        defer { if state == .wiped { finishEvents() } }
        delivery.withLock {
            let (batch, targets) = eventQueue.withLock { queue in
                defer { queue.pending.removeAll() }
                return (queue.pending, Array(queue.subscribers.values))
            }
            for event in batch {
                for continuation in targets { continuation.yield(event) }
            }
        }
    }

    /// Runs `body` under the device lock, then delivers any event it
    /// posted. Every transition goes through here.
    private func transition<T>(_ body: () throws -> T) rethrows -> T {
        defer { deliverEvents() }
        return try lock.withLock(body)
    }

    /// Applies grace expiry now. The agent calls this from a timer so keys
    /// leave memory on time even when no request arrives.
    public func tick() {
        lock.withLock { expireGrace() }
    }

    private func expireGrace() {
        guard currentState == .locking, let deadline = graceDeadline, clock.elapsed() >= deadline else { return }
        evictOnLock()
    }

    private func evictOnLock() {
        currentState = .locked
        graceDeadline = nil
        guard keybag?.hasPasscode == true else { return }
        classKeys[.complete] = nil
        classKeys[.completeUnlessOpen] = nil
        openObjects = openObjects.filter { $0.value.protectionClass != .complete }
    }

    private func canRead(_ cls: ProtectionClass) -> Bool { classKeys[cls] != nil }

    private func canCreate(_ cls: ProtectionClass) -> Bool {
        if cls == .completeUnlessOpen { return currentState != .wiped && keybag != nil }
        return classKeys[cls] != nil
    }

    // MARK: Passcode

    /// Unlocks with `passcode`. Applies the delay table and the optional
    /// erase-after limit; the same wrong passcode twice in a row counts
    /// once. On a device without a passcode, an empty `passcode` ends a
    /// lock and any other throws ``DeviceError/noPasscode``.
    public func unlock(passcode: SecretBytes) throws {
        try transition {
            expireGrace()
            guard currentState != .wiped, let keybag else { throw DeviceError.wiped }
            guard keybag.hasPasscode else {
                // Without a passcode, an empty one ends the lock, as a swipe
                // does on a phone without one; the keys never left, so no
                // event is posted. Any other passcode is a mistake to report.
                guard passcode.count == 0 else { throw DeviceError.noPasscode }
                currentState = .unlocked
                graceDeadline = nil
                return
            }
            let (passcodeKey, _) = try verifyPasscode(passcode, keybag: keybag)
            try unwrapPasscodeClasses(passcodeKey: passcodeKey, keybag: keybag)
            let wasUnlocked = currentState == .unlocked
            currentState = .unlocked
            graceDeadline = nil
            // Posted on a change only: an unlock of an unlocked device
            // makes nothing available that was not.
            if !wasUnlocked { post(.protectedDataDidBecomeAvailable) }
        }
    }

    /// The device record, with a last failure recorded later than `now`
    /// (the wall clock was set back since) moved to `now` and written
    /// back: the wait it starts is then the policy's, from the first time
    /// the device saw the clock behind it, and not a wait that moves on
    /// with the clock. Called with `lock` held.
    /// A failed write throws only if `mustWrite`; otherwise the settled
    /// record is returned all the same.
    private func readRecordSettlingTime(now: Double, mustWrite: Bool = true) throws -> DeviceRecord {
        var record = try directory.readRecord(macKey: keys.recordMACKey)
        let seconds = Int64(now.rounded(.down))
        if record.lastFailureTime > seconds {
            record.lastFailureTime = seconds
            do {
                try directory.writeRecord(record, macKey: keys.recordMACKey)
            } catch where !mustWrite {}
        }
        return record
    }

    /// Checks a passcode against the counter and the keybag. Counts a
    /// failure before the expensive check, so that killing the process
    /// mid-check cannot be used to guess for free. A repeat of the last
    /// wrong passcode is recognized only after scrypt and a failed unwrap,
    /// by a tag derived from the passcode key: the stored tag tests a guess
    /// no faster than the keybag does, and can never refuse the right
    /// passcode.
    /// Returns the passcode key on success, and the CPU time its
    /// derivation (scrypt at the keybag's cost, then HKDF) took on this
    /// thread, where the system could tell.
    private func verifyPasscode(_ passcode: SecretBytes, keybag: Keybag)
        throws -> (key: SecretBytes, derivationTime: Duration?) {
        let now = clock.now()
        let before = try readRecordSettlingTime(now: now)
        let attempts = Int(before.failedAttempts)
        if let next = PasscodePolicy.nextAttempt(failedAttempts: attempts, lastFailure: Double(before.lastFailureTime)),
           now < next {
            throw DeviceError.lockedOut(failedAttempts: attempts, until: next)
        }
        var record = before
        // Saturates: a record at the top of the range stays locked out.
        record.failedAttempts = record.failedAttempts == .max ? .max : record.failedAttempts + 1
        record.lastFailureTime = Int64(now.rounded(.down))
        try directory.writeRecord(record, macKey: keys.recordMACKey)

        let start = Self.threadCPUTime()
        let passcodeKey = try Self.derivePasscodeKey(passcode, kdf: keybag.kdf, keys: keys)
        let derivationTime = Self.threadCPUTime().flatMap { end in start.map { end - $0 } }
        let entry = keybag.entry(for: .complete)
        if (try? Self.unwrapClassKey(entry, kek: Self.classKEK(.complete, passcodeKey: passcodeKey))) != nil {
            var cleared = before
            cleared.failedAttempts = 0
            cleared.lastFailureTime = 0
            cleared.lastWrongPasscodeTag = [UInt8](repeating: 0, count: 32)
            try directory.writeRecord(cleared, macKey: keys.recordMACKey)
            return (passcodeKey, derivationTime)
        }
        var tag = try Self.wrongPasscodeTag(passcodeKey: passcodeKey)
        defer { SecretBytes.wipe(&tag) }
        if attempts > 0, constantTimeEquals(tag, before.lastWrongPasscodeTag) {
            // The last wrong passcode again: it counts once, so the record
            // goes back to what it was before this attempt.
            try directory.writeRecord(before, macKey: keys.recordMACKey)
            throw DeviceError.wrongPasscode(
                failedAttempts: attempts,
                nextAttemptAt: PasscodePolicy.nextAttempt(failedAttempts: attempts, lastFailure: Double(before.lastFailureTime)))
        }
        record.lastWrongPasscodeTag = tag
        try directory.writeRecord(record, macKey: keys.recordMACKey)
        let failed = Int(record.failedAttempts)
        if keybag.eraseAfter > 0, failed >= Int(keybag.eraseAfter) {
            try wipeLocked()
            throw DeviceError.wipedAfterFailedAttempts(failed)
        }
        throw DeviceError.wrongPasscode(
            failedAttempts: failed,
            nextAttemptAt: PasscodePolicy.nextAttempt(failedAttempts: failed, lastFailure: Double(record.lastFailureTime)))
    }

    private func unwrapPasscodeClasses(passcodeKey: SecretBytes, keybag: Keybag) throws {
        for cls in [ProtectionClass.complete, .completeUnlessOpen, .completeUntilFirstUserAuthentication] {
            classKeys[cls] = try Self.unwrapClassKey(keybag.entry(for: cls), kek: Self.classKEK(cls, passcodeKey: passcodeKey))
        }
    }

    /// Changes the passcode. Rewraps the A, B and C class keys only, so
    /// its cost does not depend on how much is stored. Counts as a passcode
    /// attempt for `old`.
    ///
    /// On a device without a passcode, `old` must be empty: this sets the
    /// first passcode, and every object stays readable under it. Throws
    /// ``DeviceError/noPasscode`` for a non-empty `old` there.
    public func changePasscode(old: SecretBytes, new: SecretBytes) throws {
        try transition {
            expireGrace()
            guard currentState != .wiped, let keybag else { throw DeviceError.wiped }
            let oldKey: SecretBytes
            var derivationTime: Duration?
            if keybag.hasPasscode {
                (oldKey, derivationTime) = try verifyPasscode(old, keybag: keybag)
            } else {
                guard old.count == 0 else { throw DeviceError.noPasscode }
                oldKey = try Self.derivePasscodeKey(nil, kdf: keybag.kdf, keys: keys)
            }
            let logN = try Self.passcodeLogN(passcodeCost, current: keybag.kdf, derivationTime: derivationTime)
            let kdf = try Keybag.PasscodeKDF(logN: logN, r: 8, p: 1, salt: SecureRandom.bytes(32))
            let newKey = try Self.derivePasscodeKey(new, kdf: kdf, keys: keys)
            var updated = keybag
            updated.kdf = kdf
            updated.hasPasscode = true
            for (i, entry) in updated.entries.enumerated() where entry.wrapType == .passcode {
                let classKey = try Self.unwrapClassKey(entry, kek: Self.classKEK(entry.protectionClass, passcodeKey: oldKey))
                updated.entries[i].wrappedKey = try AESKeyWrap.wrap(
                    classKey, kek: Self.classKEK(entry.protectionClass, passcodeKey: newKey))
            }
            // Without a passcode the device holds every key even when
            // "locked"; with its first passcode it is unlocked, so that the
            // next lock evicts them.
            try commit(updated) {
                if !keybag.hasPasscode {
                    currentState = .unlocked
                    graceDeadline = nil
                }
            }
        }
    }

    /// For a forgotten passcode: makes a new generation of A, B and C keys
    /// under `newPasscode` and keeps D. Objects of older generations fail
    /// with ``DeviceError/keyReset(_:)`` from then on. Leaves the device
    /// unlocked.
    ///
    /// A device without a passcode has none to forget, so it throws
    /// ``DeviceError/noPasscode`` and changes nothing: a reset there would
    /// only make every A, B and C object unreadable, which `changePasscode`
    /// would keep.
    public func reset(newPasscode: SecretBytes?) throws {
        try transition {
            guard currentState != .wiped, let keybag else { throw DeviceError.wiped }
            guard keybag.hasPasscode else { throw DeviceError.noPasscode }
            let kdf = try Keybag.PasscodeKDF(logN: Self.passcodeLogN(passcodeCost, current: keybag.kdf), r: 8, p: 1,
                                             salt: SecureRandom.bytes(32))
            let passcodeKey = try Self.derivePasscodeKey(newPasscode, kdf: kdf, keys: keys)
            var updated = keybag
            updated.kdf = kdf
            updated.hasPasscode = newPasscode != nil
            updated.classKeyGeneration += 1
            var fresh: [ProtectionClass: SecretBytes] = [:]
            for (i, entry) in updated.entries.enumerated() where entry.protectionClass != .none {
                let (key, newEntry) = try Self.makeClassKey(
                    entry.protectionClass, generation: updated.classKeyGeneration, passcodeKey: passcodeKey, keys: keys)
                fresh[entry.protectionClass] = key
                updated.entries[i] = newEntry
            }
            try commit(updated) {
                for (cls, key) in fresh { classKeys[cls] = key }
                openObjects = openObjects.filter { $0.value.protectionClass == .none }
                let wasUnlocked = currentState == .unlocked
                currentState = .unlocked
                graceDeadline = nil
                // On a change only, as unlock.
                if !wasUnlocked { post(.protectedDataDidBecomeAvailable) }
            }
            var record = try directory.readRecord(macKey: keys.recordMACKey)
            record.failedAttempts = 0
            record.lastFailureTime = 0
            record.lastWrongPasscodeTag = [UInt8](repeating: 0, count: 32)
            try directory.writeRecord(record, macKey: keys.recordMACKey)
        }
    }

    /// Writes a new keybag generation, then the record that vouches for it.
    ///
    /// Once the new keybag is in place the change is made: boot completes
    /// a record left behind. So from then on this boot follows it too (the
    /// keybag in memory, and `apply` for the keys that go with it), even
    /// when syncing or the record's write fails after.
    private func commit(_ updated: Keybag, apply: () -> Void = {}) throws {
        var record = try directory.readRecord(macKey: keys.recordMACKey)
        // A record an earlier commit of this boot failed to write is
        // completed first, as boot would: the keybag may run at most one
        // generation ahead of it.
        if record.keybagGeneration < updated.generation {
            record.keybagGeneration = updated.generation
            try directory.writeRecord(record, macKey: keys.recordMACKey)
        }
        var next = updated
        guard next.generation < UInt64.max else { throw DeviceError.integrity("keybag generation failed authentication") }
        next.generation += 1
        try directory.replaceKeybag(next.sealed(with: keys.keybagSealKey!))
        keybag = next
        apply()
        try directory.sync()
        record.keybagGeneration = next.generation
        try directory.writeRecord(record, macKey: keys.recordMACKey)
    }

    // MARK: Lock, wipe

    /// Locks the device. Keys stay for the grace period unless `immediately`
    /// is set (or the grace period is 0). Without a passcode nothing is
    /// evicted: the device is locked at once, with no grace period and no
    /// event, and protected data stays available. Does nothing on a wiped
    /// device.
    public func lock(immediately: Bool = false) {
        transition {
            expireGrace()
            switch currentState {
            case .unlocked where keybag?.hasPasscode != true:
                evictOnLock()
            case .unlocked:
                post(.protectedDataWillBecomeUnavailable)
                let grace = Double(keybag?.graceSeconds ?? 0)
                if immediately || grace == 0 {
                    evictOnLock()
                } else {
                    currentState = .locking
                    graceDeadline = clock.elapsed() + grace
                }
            case .locking where immediately:
                evictOnLock()
            default:
                break
            }
        }
    }

    /// Crypto-erases the device: destroys the effaceable key and the
    /// keybag. O(1) in the size of the store.
    public func wipe() throws {
        try transition { try wipeLocked() }
    }

    private func wipeLocked() throws {
        if currentState != .wiped { post(.protectedDataWillBecomeUnavailable) }
        try directory.efface()
        var record = (try? directory.readRecord(macKey: keys.recordMACKey)) ?? DeviceRecord(keybagGeneration: 0)
        record.wiped = true
        try directory.writeRecord(record, macKey: keys.recordMACKey)
        classKeys.removeAll()
        openObjects.removeAll()
        keybag = nil
        currentState = .wiped
        graceDeadline = nil
    }

    // MARK: File keys

    /// Class B's public key.
    public func classBPublicKey() throws -> ClassPublicKey {
        try lock.withLock {
            guard let keybag else { throw DeviceError.wiped }
            let entry = keybag.entry(for: .completeUnlessOpen)
            return ClassPublicKey(keyID: entry.keyID, keyGeneration: entry.keyGeneration, publicKey: entry.publicKey)
        }
    }

    /// Wraps a new object's file key for `cls`. Class B needs only the
    /// public key, so it works in every state but wiped.
    public func wrap(fileKey: SecretBytes, for cls: ProtectionClass) throws -> WrappedFileKey {
        try wrap(fileKeys: [fileKey], for: cls)[0]
    }

    /// Wraps new objects' file keys for `cls`: the same as
    /// ``wrap(fileKey:for:)`` of each in turn (which is this with one key),
    /// with the lock taken once and, for classes A, C and D, every key
    /// wrapped in one pass under it (the `AESKeyWrap.wrap(_:kek:)` of an
    /// array). Class B's keys are wrapped with its public key after the
    /// lock is let go.
    public func wrap(fileKeys: [SecretBytes], for cls: ProtectionClass) throws -> [WrappedFileKey] {
        guard let length = fileKeys.first?.count else { return [] }
        // Keys of different lengths, each of which may be wrappable: one
        // batch each.
        guard fileKeys.allSatisfy({ $0.count == length }) else { return try fileKeys.map { try wrap(fileKey: $0, for: cls) } }
        let (entry, blobs): (Keybag.Entry, [[UInt8]]?) = try lock.withLock {
            expireGrace()
            guard let keybag else { throw DeviceError.wiped }
            guard canCreate(cls) else { throw DeviceError.protectedDataUnavailable(cls) }
            let entry = keybag.entry(for: cls)
            // Class B needs only the public key: its wraps (an X25519
            // agreement each) are made after the lock is let go.
            return (entry, cls == .completeUnlessOpen ? nil : try AESKeyWrap.wrap(fileKeys, kek: classKeys[cls]!))
        }
        return try (blobs ?? fileKeys.map { try FileKeyWrap.wrapAsymmetric($0, classPublicKey: entry.publicKey) }).map {
            WrappedFileKey(protectionClass: cls, keyID: entry.keyID, keyGeneration: entry.keyGeneration, blob: $0)
        }
    }

    /// Unwraps an object's file key, if its class is readable now.
    public func unwrap(_ wrapped: WrappedFileKey) throws -> SecretBytes {
        try lock.withLock {
            expireGrace()
            return try unwrapLocked(wrapped)
        }
    }

    /// Unwraps several objects' file keys: the same as ``unwrap(_:)`` of
    /// each, in order, except that the first failure fails the whole call.
    /// The lock is taken once, and keys of one class (A, C or D) under
    /// the keybag's current class key are unwrapped in one pass.
    public func unwrap(_ wrapped: [WrappedFileKey]) throws -> [SecretBytes] {
        try lock.withLock {
            expireGrace()
            // Anything else, or any failure, goes key by key: that finds
            // the first failure, and reports it as ``unwrap(_:)`` would.
            if let keys = try? unwrapTogether(wrapped) { return keys }
            return try wrapped.map { try unwrapLocked($0) }
        }
    }

    /// `wrapped` unwrapped in one pass, if they are all of one class (A,
    /// C or D), readable now, under its current key; nil otherwise. Throws
    /// if any fails to unwrap, without saying which.
    private func unwrapTogether(_ wrapped: [WrappedFileKey]) throws -> [SecretBytes]? {
        guard let cls = wrapped.first?.protectionClass, cls != .completeUnlessOpen, let keybag,
              let classKey = classKeys[cls] else { return nil }
        let entry = keybag.entry(for: cls)
        for key in wrapped {
            guard key.protectionClass == cls, constantTimeEquals(key.keyID, entry.keyID),
                  key.keyGeneration == entry.keyGeneration else { return nil }
        }
        return try AESKeyWrap.unwrap(wrapped.map(\.blob), kek: classKey)
    }

    private func unwrapLocked(_ wrapped: WrappedFileKey) throws -> SecretBytes {
        guard let keybag else { throw DeviceError.wiped }
        let cls = wrapped.protectionClass
        let entry = keybag.entry(for: cls)
        guard constantTimeEquals(wrapped.keyID, entry.keyID), wrapped.keyGeneration == entry.keyGeneration else {
            if wrapped.keyGeneration < entry.keyGeneration { throw DeviceError.keyReset(cls) }
            throw DeviceError.integrity("wrapped key failed authentication")
        }
        guard let classKey = classKeys[cls] else { throw DeviceError.protectedDataUnavailable(cls) }
        do {
            if cls == .completeUnlessOpen {
                return try FileKeyWrap.unwrapAsymmetric(wrapped.blob, classPrivateKey: classKey, classPublicKey: entry.publicKey)
            }
            return try AESKeyWrap.unwrap(wrapped.blob, kek: classKey)
        } catch {
            throw DeviceError.integrity("wrapped key failed authentication")
        }
    }

    /// Rewraps a file key from its class to `newClass`, without the key
    /// leaving the device: needs the current class readable and the new
    /// class creatable.
    public func rewrap(_ wrapped: WrappedFileKey, to newClass: ProtectionClass) throws -> WrappedFileKey {
        let fileKey = try unwrap(wrapped)
        return try wrap(fileKey: fileKey, for: newClass)
    }

    // MARK: Open objects

    /// Opens an object: unwraps its file key now and keeps it, so that a
    /// class B object stays readable across a lock. Class A keys are still
    /// evicted when grace ends. Returns the file key. An object already
    /// open is opened again in its place; a new one beyond
    /// ``maxOpenObjects`` throws ``DeviceError/tooManyOpenObjects(limit:)``.
    @discardableResult
    public func open(objectID: String, wrapped: WrappedFileKey) throws -> SecretBytes {
        try lock.withLock {
            expireGrace()
            // Open already: the key kept is given again, as reading the
            // object does, even where its class key is not held now (a
            // class B object opened before a lock). Object IDs are drawn
            // afresh for each version, so this is the same key.
            if let kept = openObjects[objectID], kept.protectionClass == wrapped.protectionClass {
                return kept.fileKey
            }
            let key = try unwrapLocked(wrapped)
            try keepOpen(objectID, OpenObject(protectionClass: wrapped.protectionClass, fileKey: key))
            return key
        }
    }

    /// Keeps the key of an object just created through an open handle, so
    /// it can be read back before close even when its class is not
    /// readable now (class B created while locked). Counts against
    /// ``maxOpenObjects`` as ``open(objectID:wrapped:)`` does.
    public func registerOpen(objectID: String, fileKey: SecretBytes, protectionClass: ProtectionClass) throws {
        try lock.withLock {
            expireGrace()
            guard canCreate(protectionClass) else { throw DeviceError.protectedDataUnavailable(protectionClass) }
            try keepOpen(objectID, OpenObject(protectionClass: protectionClass, fileKey: fileKey))
        }
    }

    /// Puts `object` in the table under `objectID`, replacing the entry
    /// of that ID; a new ID only while fewer than ``maxOpenObjects`` are
    /// open. Called with `lock` held.
    private func keepOpen(_ objectID: String, _ object: OpenObject) throws {
        guard openObjects[objectID] != nil || openObjects.count < Self.maxOpenObjects else {
            throw DeviceError.tooManyOpenObjects(limit: Self.maxOpenObjects)
        }
        openObjects[objectID] = object
    }

    /// The file key of an open object, while its class rules allow.
    public func openFileKey(objectID: String) throws -> SecretBytes {
        try lock.withLock {
            expireGrace()
            guard let object = openObjects[objectID] else { throw DeviceError.notOpen }
            return object.fileKey
        }
    }

    /// Closes an object; its key is wiped. Throws ``DeviceError/notOpen``
    /// if it is not open (never opened, closed already, or the device
    /// rebooted since).
    public func close(objectID: String) throws {
        guard lock.withLock({ openObjects.removeValue(forKey: objectID) }) != nil else { throw DeviceError.notOpen }
    }

    // MARK: Key derivation

    /// The scrypt `logN` (with r = 8, p = 1) for a passcode that replaces
    /// one set with `current`. A fixed cost's `logN`, as given. For a
    /// calibrated cost, where `current` has r = 8, p = 1 and a `logN` in
    /// ``Options/logNRange``: ``retunedLogN(current:derivationTime:target:)``
    /// where `derivationTime` (above zero) is the CPU time the old
    /// passcode's derivation at `current` took, else
    /// ``keptLogN(calibrated:current:)`` of a calibration, which times a
    /// short scrypt run. Otherwise the calibration's.
    static func passcodeLogN(_ cost: PasscodeCost, current: Keybag.PasscodeKDF,
                             derivationTime: Duration? = nil) throws -> UInt8 {
        guard case .calibrated(let milliseconds) = cost, current.r == 8, current.p == 1,
              Options.logNRange.contains(current.logN) else { return try calibratedLogN(cost) }
        if let derivationTime, derivationTime > .zero {
            return retunedLogN(current: current.logN, derivationTime: derivationTime, target: .milliseconds(milliseconds))
        }
        return keptLogN(calibrated: try calibratedLogN(cost), current: current.logN)
    }

    /// The `logN` for a derivation at `current` that took `derivationTime`,
    /// within 12…19 as a calibration's: raised one step for each doubling
    /// it needs to reach `target` where it took less; lowered one step
    /// where it took at least 2.2 times `target` (half of it is then at
    /// least 1.1 times `target`); else `current`.
    static func retunedLogN(current: UInt8, derivationTime: Duration, target: Duration) -> UInt8 {
        // A derivation at the cost itself meets the memory and caches that
        // the calibration's short run does not (which predicted 2^16 a
        // quarter too fast; docs/performance.md, "After pass 27"). The 10%
        // between raising and lowering keeps a cost whose time sits just
        // above `target` from moving with the noise of one run; lowering
        // one step at most bounds what one slowed run can take off. CPU
        // time, not wall time, so that a descheduled, stopped or suspended
        // agent is not taken for a slow one. Duration's integer arithmetic
        // keeps the bounds exact.
        let lowest = Int(calibrationFloor), highest = Int(Options.logNRange.upperBound)
        var logN = Int(current)
        if derivationTime < target {
            var time = derivationTime
            while time < target, logN < highest {
                time *= 2
                logN += 1
            }
        } else if derivationTime / 2 >= target * 11 / 10 {
            logN -= 1
        }
        return UInt8(min(max(logN, lowest), highest))
    }

    /// CPU time (user and system) the calling thread has used; nil where
    /// the system cannot tell.
    static func threadCPUTime() -> Duration? {
        var now = timespec()
        guard clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now) == 0 else { return nil }
        return .seconds(now.tv_sec) + .nanoseconds(now.tv_nsec)
    }

    /// `current` where it is `calibrated` or one step above, and within
    /// ``Options/logNRange``; else `calibrated`. The result is never below
    /// `calibrated`. Applied at every reset, and at the first passcode of
    /// a device made without one (neither derives an old passcode's key to
    /// time), a cost rises whenever a calibration asks for more, and falls
    /// only when one asks for two or more steps less: it settles at the
    /// highest value the calibration gives on the machine, at most about
    /// four times the target.
    static func keptLogN(calibrated: UInt8, current: UInt8) -> UInt8 {
        // The calibration's one short timing is noisy: recalibrated at
        // every passcode change, a passcode on a busy 2-core machine got
        // 2^15 or 2^16 about evenly, and the unlock after one change took
        // twice as long as after the next (docs/performance.md, "After
        // pass 26").
        Options.logNRange.contains(current) && (current == calibrated || current == calibrated &+ 1) ? current : calibrated
    }

    /// The smallest `logN` a calibration gives: that of its short run.
    static let calibrationFloor: UInt8 = 12

    static func calibratedLogN(_ cost: PasscodeCost) throws -> UInt8 {
        switch cost {
        case .fixed(let logN):
            return logN
        case .calibrated(let milliseconds):
            // scrypt's time is linear in N: time one small run and scale.
            let password = SecretBytes(copying: Array("calibration".utf8))
            let salt = [UInt8](repeating: 0, count: 32)
            let probe = calibrationFloor
            let start = ContinuousClock.now
            _ = try PasswordKDF.scrypt(password: password, salt: salt,
                                       parameters: .init(n: 1 << UInt64(probe), r: 8, p: 1), outputByteCount: 32)
            let elapsed = ContinuousClock.now - start
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            let ratio = (Double(milliseconds) / 1000) / max(seconds, 1e-6)
            let logN = Int(probe) + max(0, Int(log2(ratio).rounded(.up)))
            return UInt8(min(Int(Options.logNRange.upperBound), max(Int(probe), logN)))
        }
    }

    /// scrypt over the passcode, then HKDF keyed with the device's tangle
    /// key, so the result cannot be computed off this device.
    static func derivePasscodeKey(_ passcode: SecretBytes?, kdf: Keybag.PasscodeKDF, keys: DeviceKeys) throws -> SecretBytes {
        guard let passcode else {
            return try HKDF.deriveKey(inputKeyMaterial: keys.passcodeTangle, info: Array("locker v1 no passcode".utf8),
                                      outputByteCount: 32)
        }
        let stretched = try PasswordKDF.scrypt(password: passcode, salt: kdf.salt, parameters: kdf.scryptParameters,
                                               outputByteCount: 32)
        return try HKDF.deriveKey(inputKeyMaterial: stretched, secretSalt: keys.passcodeTangle,
                                  info: Array("locker v1 passcode key".utf8), outputByteCount: 32)
    }

    /// The record's tag of a wrong passcode. It derives from the passcode
    /// key, so testing a guess against it costs a scrypt and needs `uid`.
    static func wrongPasscodeTag(passcodeKey: SecretBytes) throws -> [UInt8] {
        let tag = try HKDF.deriveKey(inputKeyMaterial: passcodeKey, info: Array("locker v1 wrong passcode tag".utf8),
                                     outputByteCount: 32)
        return tag.withUnsafeBytes { Array($0) }
    }

    static func classKEK(_ cls: ProtectionClass, passcodeKey: SecretBytes) throws -> SecretBytes {
        try HKDF.deriveKey(inputKeyMaterial: passcodeKey, info: Array("locker v1 class \(cls.letter) kek".utf8),
                           outputByteCount: 32)
    }

    static func makeClassKey(_ cls: ProtectionClass, generation: UInt32, passcodeKey: SecretBytes, keys: DeviceKeys)
        throws -> (SecretBytes, Keybag.Entry)
    {
        let kek = cls == .none ? keys.classDKEK : try classKEK(cls, passcodeKey: passcodeKey)
        var publicKey: [UInt8] = []
        let classKey: SecretBytes
        if cls == .completeUnlessOpen {
            let pair = try X25519.PrivateKey()
            classKey = pair.rawRepresentation
            publicKey = pair.publicKey
        } else {
            classKey = try SecretBytes(randomCount: 32)
        }
        let entry = Keybag.Entry(
            protectionClass: cls, wrapType: cls == .none ? .device : .passcode, keyID: try SecureRandom.bytes(16),
            keyGeneration: generation, wrappedKey: try AESKeyWrap.wrap(classKey, kek: kek), publicKey: publicKey)
        return (classKey, entry)
    }

    static func unwrapClassKey(_ entry: Keybag.Entry, kek: SecretBytes) throws -> SecretBytes {
        do {
            return try AESKeyWrap.unwrap(entry.wrappedKey, kek: kek)
        } catch {
            throw DeviceError.integrity("keybag entry \(entry.protectionClass.letter) failed authentication")
        }
    }
}
