import Foundation
import Locker
import LockerCrypto
import LockerDevice
import LockerFormat
import LockerIO
import Testing

// Every store and device operation, with call N failing, for every N the
// operation makes: ENOSPC or EIO once, EIO from N on (what a crash at N
// leaves), EINTR once, a short write. After each run, with the real file
// system: no descriptor leaked, no temporary left where a cleanup could
// run, the store verifies (or `repair` makes it clean, with nothing
// damaged), and the namespace is exactly as before or exactly as after
// the operation; for the device, exactly one passcode unlocks, the same
// one in the running boot and after a reboot. See FaultyFileSystem.swift
// for the injection.

private let fastCost = PasscodeCost.fixed(logN: 10)
private let chunk = 16 << 10
private let longName = String(repeating: "long-directory-name-", count: 8)

/// A batch item that stores `data` at `path`.
private func item(_ path: String, _ data: [UInt8]) -> PutBatchItem {
    var offset = 0
    return PutBatchItem(path: try! StorePath(path)) { buffer in
        let n = min(buffer.count, data.count - offset)
        buffer.copyBytes(from: data[offset..<(offset + n)])
        offset += n
        return n
    }
}

/// One operation on a store, and whether the fault covers opening it.
private struct StoreOperation {
    let name: String
    var coversOpen = false
    /// A batch: each object ends old or new on its own, so the namespace
    /// may mix them.
    var perObject = false
    let body: (Store) throws -> Void
}

/// A prepared store on a device, copied afresh for every run.
///
/// /d/obj (3 chunks), /d/sub/small (100 bytes), /e and /empty (empty
/// directories), /<longName>/x (10 bytes).
private final class StoreBench {
    let root: String
    let device: Device
    var template: String { root + "/template" }
    private var runs = 0

    init() throws {
        root = scratchDirectory() + "locker-fault-" + UUID().uuidString.prefix(8)
        device = try Device.initialize(at: DeviceDirectory(path: root + "/device"), passcode: secret("1234"),
                                       options: .init(passcodeCost: fastCost))
        let store = try Store(path: template, keys: device, options: Self.options())
        try write(store, "/d/obj", bytes(3 * chunk, seed: 1))
        try write(store, "/d/sub/small", bytes(100, seed: 2))
        try store.makeDirectory(StorePath("/e"))
        try store.makeDirectory(StorePath("/empty"))
        try write(store, "/" + longName + "/x", bytes(10, seed: 5))
    }

    static func options(_ fileSystem: FileSystem = .init()) -> Store.Options {
        // One worker: a batch then stores its objects in order, so the
        // calls are the same from run to run.
        Store.Options(chunkSize: UInt32(chunk), workers: 1, fileSystem: fileSystem)
    }

    func cleanUp() {
        device.shutdown()
        try? FileManager.default.removeItem(atPath: root)
    }

    /// The paths among `paths` that read back as `truth` from the store at
    /// `directory`.
    func readable(_ paths: [String], as truth: [UInt8], in directory: String) throws -> [String] {
        let store = try Store(path: directory, keys: device, options: Self.options())
        return paths.filter { path in
            var data: [UInt8] = []
            guard (try? store.read(StorePath(path)) { data.append(contentsOf: $0) }) != nil else { return false }
            return data == truth
        }
    }

    /// Runs `operation` with every call failing from its `n`-th rename
    /// (counted from 0) on, as a crash there would leave it.
    func cutOff(_ operation: StoreOperation, atRename n: Int) throws -> (directory: String, error: (any Error)?) {
        let calls = try run(operation, .none).calls
        let renames = calls.indices.filter { ["rename", "renameat2"].contains(calls[$0]) }
        try #require(renames.count > n, "\(calls)")
        let cut = try run(operation, .failFrom(at: renames[n] + 1, errno: EIO))
        return (cut.directory, cut.error)
    }

    /// Runs `operation` once for each call it makes, every call failing
    /// from that one on (as a crash there would leave the store), and
    /// hands `check` each run's directory, the call's number and how many
    /// calls there are.
    func crashAtEveryCall(_ operation: StoreOperation, _ check: (_ directory: String, _ at: Int, _ count: Int) throws -> Void) throws {
        let count = try run(operation, .none).calls.count
        for at in 1...count {
            try check(try run(operation, .failFrom(at: at, errno: EIO)).directory, at, count)
        }
    }

    /// Makes the store at `directory` the one later runs start from.
    func adopt(_ directory: String) throws {
        try FileManager.default.removeItem(atPath: template)
        try copyTree(directory, to: template)
    }

    /// Runs `operation` on a fresh copy with `fault`; returns the copy.
    func run(_ operation: StoreOperation, _ fault: Fault) throws
        -> (directory: String, error: (any Error)?, calls: [String], faulty: FaultyFileSystem)
    {
        runs += 1
        let directory = root + "/runs/\(runs)"
        try copyTree(template, to: directory)
        let faulty = FaultyFileSystem()
        var failure: (any Error)?
        do {
            // In a closure, so that the store is gone before the checks.
            try {
                if operation.coversOpen { faulty.arm(fault) }
                let store = try Store(path: directory, keys: device, options: Self.options(faulty.fileSystem))
                if !operation.coversOpen { faulty.arm(fault) }
                try operation.body(store)
            }()
        } catch {
            failure = error
        }
        return (directory, failure, faulty.disarm().calls, faulty)
    }
}

/// What the runs of one operation came to, for the summary line.
private struct Tally {
    var runs = 0
    var succeeded = 0
    var errors: [String: Int] = [:]
    var garbageRepaired = 0
    var temporariesLeft = 0

    func line(_ name: String, calls: [String]) -> String {
        var perCall: [String: Int] = [:]
        for call in calls { perCall[call, default: 0] += 1 }
        let callList = perCall.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
        let errorList = errors.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
        return "fault injection: \(name): \(calls.count) calls (\(callList)); \(runs) runs, \(succeeded) succeeded, "
            + "thrown: [\(errorList)]; garbage repaired after \(garbageRepaired), temporaries left by \(temporariesLeft)"
    }
}

/// Kind of a thrown error, for the tally: only the library's typed errors
/// count as typed.
private func errorKind(_ error: any Error) -> String? {
    switch error {
    case let e as IOError: "IOError(\(e.operation))"
    case let e as StoreError: "StoreError.\(e)".prefix { $0 != "(" }.description
    case let e as DeviceError:
        if case .io(let io) = e { "DeviceError.io(\(io.operation))" } else { "DeviceError.\(e)".prefix { $0 != "(" }.description }
    default: nil
    }
}

@Suite(.serialized) struct FaultInjectionTests {
    // MARK: Store

    @Test func putNewObject() throws {
        try exercise(StoreOperation(name: "put new") { try write($0, "/d/new", bytes(3 * chunk, seed: 3)) })
    }

    @Test func putReplacingObject() throws {
        try exercise(StoreOperation(name: "put replace") { try write($0, "/d/obj", bytes(3 * chunk, seed: 4)) })
    }

    @Test func putBatch() throws {
        try exercise(StoreOperation(name: "put batch", perObject: true) { store in
            try store.putBatch([item("/d/new", bytes(2 * chunk, seed: 5)), item("/d/obj", bytes(100, seed: 6)),
                                item("/e/new", bytes(10, seed: 7))])
        })
    }

    @Test func putBatchStagedThenCommitted() throws {
        // Staged, the next batch staged while the first is not yet
        // committed (as `put -r` pipelines them), then both committed.
        try exercise(StoreOperation(name: "staged batches", perObject: true) { store in
            let first = try store.stageBatch([item("/d/new", bytes(2 * chunk, seed: 8)), item("/e/new", bytes(10, seed: 9))])
            let second = try store.stageBatch([item("/d/obj", bytes(100, seed: 10))])
            try store.commit(first)
            try store.commit(second)
        })
    }

    @Test func makeDirectories() throws {
        // New subtrees under the root and under existing directories, and
        // directories that exist already.
        try exercise(StoreOperation(name: "make directories", perObject: true) { store in
            try store.makeDirectories([StorePath("/fresh/a/b"), StorePath("/fresh/c"), StorePath("/d/new"),
                                       StorePath("/d/sub"), StorePath("/e/x/y")])
        })
    }

    @Test func stagedTree() throws {
        // New subtrees with objects written inside them (one with a data
        // file), an object beside them in an existing directory, then
        // the publication.
        try exercise(StoreOperation(name: "staged tree", perObject: true) { store in
            let tree = try store.stageTree([StorePath("/fresh/a"), StorePath("/d/new")])
            try store.commit(try store.stageBatch([item("/fresh/a/one", bytes(100, seed: 11)), item("/d/new/big", bytes(4 * chunk, seed: 12)),
                                                   item("/fresh/two", bytes(10, seed: 13)), item("/d/beside", bytes(20, seed: 14))],
                                                  into: tree))
            try store.publish(tree)
        })
    }

    @Test func removeObject() throws {
        try exercise(StoreOperation(name: "rm object") { try $0.remove(StorePath("/d/obj")) })
    }

    @Test func removeDirectory() throws {
        try exercise(StoreOperation(name: "rm directory") { try $0.remove(StorePath("/empty")) })
    }

    @Test func moveObject() throws {
        try exercise(StoreOperation(name: "mv object") {
            try $0.move(StorePath("/d/obj"), to: StorePath("/e/moved"))
        })
    }

    @Test func moveDirectoryToLongName() throws {
        // A long name lives in the directory's record too.
        try exercise(StoreOperation(name: "mv directory to a long name") {
            try $0.move(StorePath("/d"), to: StorePath("/e/" + longName))
        })
    }

    @Test func moveDirectoryFromLongName() throws {
        try exercise(StoreOperation(name: "mv directory from a long name") {
            try $0.move(StorePath("/" + longName), to: StorePath("/e/short"))
        })
    }

    /// A directory a crash left half moved (its record names the new place
    /// and the old one as previous; the directory not yet renamed; the
    /// intent left, since every call fails), moved again with a crash at
    /// every call: it stays reachable, with its object, at its old path or
    /// its new one.
    @Test func aHalfMovedDirectoryMovedAgainStaysReachable() throws {
        let bench = try StoreBench()
        defer { bench.cleanUp() }
        let move = StoreOperation(name: "mv /d /e/d") { try $0.move(StorePath("/d"), to: StorePath("/e/d")) }
        let reachable = { try bench.readable(["/d/obj", "/e/d/obj"], as: bytes(3 * chunk, seed: 1), in: $0) }
        // The directory's own rename is the move's third rename (the
        // first puts the intent in place, the second its rewritten record).
        let halfMoved = try bench.cutOff(move, atRename: 2)
        #expect(halfMoved.error != nil)
        #expect(FileManager.default.fileExists(atPath: halfMoved.directory + "/move.intent"))
        #expect(try reachable(halfMoved.directory) == ["/d/obj"])
        try bench.adopt(halfMoved.directory)

        try bench.crashAtEveryCall(move) { directory, at, count in
            let reached = try reachable(directory)
            #expect(reached.count == 1, "crash at call \(at) of \(count): \(reached)")
        }
    }

    /// A record naming two places with no intent beside it, as a crash
    /// under an older build left it: the directory at its new place, its
    /// record naming the old one too. Moved again, to that old place, and
    /// cut off at any call, the directory stays reachable at one place,
    /// also once the next change has settled the move: a rollback goes to
    /// where it was reached, not to the record's other place.
    @Test func aRecordNamingTwoPlacesWithoutIntentMovedBackStaysReachable() throws {
        let bench = try StoreBench()
        defer { bench.cleanUp() }
        let move = StoreOperation(name: "mv /d /e/d") { try $0.move(StorePath("/d"), to: StorePath("/e/d")) }
        let back = StoreOperation(name: "mv /e/d /d") { try $0.move(StorePath("/e/d"), to: StorePath("/d")) }
        let reachable = { try bench.readable(["/d/obj", "/e/d/obj"], as: bytes(3 * chunk, seed: 1), in: $0) }
        // The fourth rename puts the record naming only the new place in.
        let legacy = try bench.cutOff(move, atRename: 3)
        #expect(legacy.error != nil)
        try FileManager.default.removeItem(atPath: legacy.directory + "/move.intent")
        #expect(try reachable(legacy.directory) == ["/e/d/obj"])
        try bench.adopt(legacy.directory)

        try bench.crashAtEveryCall(back) { directory, at, count in
            #expect(try reachable(directory).count == 1, "crash at call \(at) of \(count)")
            // The next change settles what the cut-off move left.
            try Store(path: directory, keys: bench.device, options: StoreBench.options()).makeDirectory(StorePath("/z"))
            #expect(try reachable(directory).count == 1, "crash at call \(at) of \(count), then settled")
        }
    }

    /// A move cut off with both names of its object left, settled by the
    /// next change while one call of that change fails: the intent goes
    /// only with the old name. A failed read is not a name that is gone.
    @Test func aFailedReadWhileSettlingKeepsTheIntent() throws {
        let bench = try StoreBench()
        defer { bench.cleanUp() }
        let move = StoreOperation(name: "mv /d/obj /e/obj") { try $0.move(StorePath("/d/obj"), to: StorePath("/e/obj")) }
        let calls = try bench.run(move, .none).calls
        let unlink = try #require(calls.firstIndex(of: "unlink"), "\(calls)")
        let bothNames = try bench.run(move, .failFrom(at: unlink + 1, errno: EIO))
        let template = bothNames.directory
        func state(_ directory: String) -> (intent: Bool, old: Bool, new: Bool) {
            let fm = FileManager.default
            let store = try? Store(path: directory, keys: bench.device, options: StoreBench.options())
            let names = ["/d/obj", "/e/obj"].map { path in
                (try? store?.read(StorePath(path)) { _ in }) != nil
            }
            return (fm.fileExists(atPath: directory + "/move.intent"), names[0], names[1])
        }
        let before = state(template)
        try #require(before.intent && before.old && before.new, "\(before)")
        try bench.adopt(template)

        let change = StoreOperation(name: "mkdir /z") { try $0.makeDirectory(StorePath("/z")) }
        let count = try bench.run(change, .none).calls.count
        var readsFailed = 0
        for at in 1...count {
            let run = try bench.run(change, .failOnce(at: at, errno: EIO))
            if run.calls[at - 1] == "read" || run.calls[at - 1] == "pread" { readsFailed += 1 }
            let after = state(run.directory)
            #expect(after.new, "failure at call \(at) (\(run.calls[at - 1])): the new name is gone")
            #expect(after.intent || !after.old, "failure at call \(at) (\(run.calls[at - 1])): both names left, the intent gone")
        }
        #expect(readsFailed > 0)
    }

    @Test func setClass() throws {
        try exercise(StoreOperation(name: "setclass") { try $0.setClass(StorePath("/d/obj"), to: .complete) })
    }

    @Test func makeDirectory() throws {
        try exercise(StoreOperation(name: "mkdir") { try $0.makeDirectory(StorePath("/e/new"), defaultClass: .complete) })
    }

    @Test func openStore() throws {
        try exercise(StoreOperation(name: "open store", coversOpen: true) { _ in })
    }

    private func exercise(_ operation: StoreOperation) throws {
        let bench = try StoreBench()
        defer { bench.cleanUp() }
        let before = try snapshot(Store(path: bench.template, keys: bench.device, options: StoreBench.options()))

        // Without a fault: the calls, twice to see they are the same.
        let clean = try bench.run(operation, .none)
        try #require(clean.error == nil, "\(operation.name) without a fault: \(clean.error!)")
        let after = try snapshot(Store(path: clean.directory, keys: bench.device, options: StoreBench.options()))
        let again = try bench.run(operation, .none)
        try #require(again.calls == clean.calls, "\(operation.name): the calls differ between two clean runs")
        try #require(!clean.calls.isEmpty)

        var issues: [String] = []
        var tally = Tally()
        for fault in faultPlan(clean.calls) {
            let run = try bench.run(operation, fault)
            let what = "\(operation.name), \(fault) (\(clean.calls[at(fault) - 1]))"
            func issue(_ text: String) { issues.append("\(what): \(text)") }
            tally.runs += 1

            if let error = run.error {
                if let kind = errorKind(error) {
                    tally.errors[kind, default: 0] += 1
                } else {
                    issue("untyped error \(type(of: error)): \(error)")
                }
                // Every fault is an I/O error, and must be reported as one:
                // not as "not found", "already exists" or damage.
                // (A put whose directory sync failed after its commit says
                // so: it is an I/O error that says the object was stored.)
                if let error = error as? StoreError, !error.isStoredNotDurable { issue("an I/O fault reported as \(error)") }
                if case .interruptOnce = fault { issue("EINTR was not retried: \(error)") }
                if case .shortWrite = fault { issue("a short write was not continued: \(error)") }
            } else {
                tally.succeeded += 1
            }
            if !run.faulty.openDescriptors.isEmpty { issue("descriptors left open: \(run.faulty.openDescriptors.sorted())") }
            let held = descriptors(under: run.directory)
            if !held.isEmpty { issue("descriptors into the store: \(held)") }

            // A cleanup runs after any single fault; only a persistent one
            // can stop it, or a failed sync of a directory after a rename,
            // which keeps what a crash may still need.
            let left = temporaries(under: run.directory)
            if !left.isEmpty {
                tally.temporariesLeft += 1
                if let error = run.error, !fault.isPersistent, !isDirectorySyncFailure(error) {
                    issue("temporaries left after a thrown error: \(left)")
                }
            }

            // No fault leaves damage. (An object move cut off between its
            // two names leaves garbage: the old name, which its move intent
            // marks, and which --repair removes.)
            func damage(_ report: VerifyReport) -> [String] {
                report.damaged.map { "\($0.location): \($0.reason)" }
            }
            let store = try Store(path: run.directory, keys: bench.device, options: StoreBench.options())
            let report = try store.verify(readData: true)
            if !damage(report).isEmpty { issue("damaged: \(damage(report))") }
            if !report.notChecked.isEmpty { issue("not checked: \(report.notChecked.map(\.location))") }
            if !report.garbage.isEmpty {
                tally.garbageRepaired += 1
                switch fault {
                case .interruptOnce, .shortWrite: issue("garbage after a fault that must not matter: \(report.garbage)")
                default: break
                }
                _ = try store.verify(readData: true, repair: true)
                let recheck = try store.verify(readData: true)
                if !recheck.garbage.isEmpty || !damage(recheck).isEmpty {
                    issue("not clean after repair: garbage \(recheck.garbage), damaged \(damage(recheck))")
                }
            }
            var stillLeft = temporaries(under: run.directory)
            if !stillLeft.isEmpty {
                // verify leaves what a live process has locked. A child
                // that another test of this process is starting holds a
                // copy of every descriptor, locks included, from its fork
                // until its exec closes them (this run's are all closed:
                // checked above): look again once it has.
                usleep(200_000)
                _ = try store.verify(readData: false, repair: true)
                stillLeft = temporaries(under: run.directory)
            }
            if !stillLeft.isEmpty { issue("temporaries that verify does not remove: \(stillLeft)") }
            // A directory move cut off leaves its record naming two places
            // only until it is settled (here by the repair above).
            let twoPlaces = try recordsNamingTwoPlaces(under: run.directory, device: bench.device)
            if !twoPlaces.isEmpty { issue("directory records still naming two places: \(twoPlaces)") }

            let now: [String: String]
            do {
                now = try snapshot(store)
            } catch {
                issue("namespace unreadable: \(error)")
                continue
            }
            if run.error == nil || (run.error as? StoreError)?.isStoredNotDurable == true {
                if now != after { issue("\(run.error == nil ? "succeeded" : "stored"), but the namespace is not the new one: \(differences(now, after))") }
            } else if operation.perObject {
                for key in Set(now.keys).union(before.keys).union(after.keys) where now[key] != before[key] && now[key] != after[key] {
                    issue("\(key) is neither old nor new: \(now[key] ?? "absent")")
                }
            } else if now != before && now != after {
                issue("neither the old namespace nor the new one: before \(differences(now, before)); after \(differences(now, after))")
            }
            try? FileManager.default.removeItem(atPath: run.directory)
        }
        print(tally.line(operation.name, calls: clean.calls))
        #expect(issues.isEmpty, "\(issues.count) issues:\n\(issues.prefix(40).joined(separator: "\n"))")
    }

    /// The directory records under a store that name a previous place.
    private func recordsNamingTwoPlaces(under store: String, device: Device) throws -> [String] {
        let keys = try MetadataKeys(metadataKey: device.metadataKey())
        let files = FileManager.default.enumerator(atPath: store + "/ns")?.compactMap { $0 as? String } ?? []
        return try (["ns/.dir"] + files.filter { $0.hasSuffix("/.dir") }.map { "ns/" + $0 }).filter { file in
            let bytes = try Data(contentsOf: URL(fileURLWithPath: store + "/" + file))
            return try DirectoryRecord.open(Array(bytes), with: keys).previous != nil
        }
    }

    // MARK: Device

    @Test func changePasscode() throws {
        try exerciseKeybagChange("passwd") { try $0.changePasscode(old: secret("1234"), new: secret("5678")) }
    }

    @Test func resetPasscode() throws {
        try exerciseKeybagChange("reset") { try $0.reset(newPasscode: secret("5678")) }
    }

    /// An operation that writes a new keybag, from passcode 1234 to 5678.
    /// After it, rebooted with the real file system, exactly one of the
    /// two passcodes unlocks (the new one if it succeeded). The same boot
    /// agrees: the passcode that unlocks it is the one a reboot takes, a
    /// file key it wraps unwraps after a reboot, and a passwd after the
    /// failure succeeds.
    private func exerciseKeybagChange(_ name: String, _ change: @escaping (Device) throws -> Void) throws {
        let bench = try DeviceBench()
        defer { bench.cleanUp() }
        var live: [String: LiveState] = [:]
        let operation = DeviceOperation(name: name) { directory, faulty, fault in
            let device = try Device.boot(at: directory, passcodeCost: fastCost)
            defer { device.shutdown() }
            try device.unlock(passcode: secret("1234"))
            faulty.arm(fault)
            defer {
                faulty.disarm()
                try? copyTree(directory.path, to: directory.path + "-after")
                live[directory.path] = LiveState(continuing: device)
            }
            try change(device)
        }
        try bench.exercise(operation) { run, issue in
            let after = run.directory + "-after"
            defer { try? FileManager.default.removeItem(atPath: after) }
            let unlocks = ["1234", "5678"].map { rebootUnlocks(copyOf: after, with: $0, issue) }
            if unlocks.filter({ $0 }).count != 1 { issue("passcodes that unlock after a reboot (old, new): \(unlocks)") }
            if run.error == nil && unlocks != [false, true] { issue("\(name) succeeded, but the new passcode does not unlock") }

            guard let state = live[run.directory] else { return issue("no live state") }
            if state.unlocks != unlocks { issue("this boot unlocks with (old, new) \(state.unlocks), a reboot with \(unlocks)") }
            if let failure = state.failure { return issue("passwd in the same boot, after: \(failure)") }
            do {
                let device = try Device.boot(at: DeviceDirectory(path: run.directory), passcodeCost: fastCost)
                defer { device.shutdown() }
                try device.unlock(passcode: secret("2468"))
                if let wrapped = state.wrapped, let fileKey = state.fileKey, try device.unwrap(wrapped) != fileKey {
                    issue("a file key wrapped in the same boot unwraps wrong after a reboot")
                }
            } catch {
                issue("after passwd to 2468 and a reboot: \(error)")
            }
        }
    }

    @Test func initializeOverExistingDevice() throws {
        let bench = try DeviceBench()
        defer { bench.cleanUp() }
        let operation = DeviceOperation(name: "init over a device", expectsError: true) { directory, faulty, fault in
            faulty.arm(fault)
            _ = try Device.initialize(at: directory, passcode: secret("9999"), options: .init(passcodeCost: fastCost))
        }
        let original = try bench.files(bench.template)
        try bench.exercise(operation) { run, issue in
            if run.error == nil { issue("init replaced a live device") }
            if try bench.files(run.directory) != original { issue("device files changed") }
            if !rebootUnlocks(copyOf: run.directory, with: "1234", issue) { issue("the old passcode does not unlock") }
        }
    }
}

/// Whether the device in a copy of `directory`, booted with the real file
/// system, unlocks with `code`.
private func rebootUnlocks(copyOf directory: String, with code: String, _ issue: (String) -> Void) -> Bool {
    let copy = directory + "-" + code
    defer { try? FileManager.default.removeItem(atPath: copy) }
    do {
        try copyTree(directory, to: copy)
        let device = try Device.boot(at: DeviceDirectory(path: copy), passcodeCost: fastCost)
        defer { device.shutdown() }
        try device.unlock(passcode: secret(code))
        return true
    } catch DeviceError.wrongPasscode {
        return false
    } catch {
        issue("reboot to try \(code): \(error)")
        return false
    }
}

/// What a device does right after a keybag change, in the same boot: which
/// of 1234 and 5678 unlock it, a file key it wraps for class A, and
/// whether a passwd from the working passcode to 2468 then succeeds.
private struct LiveState {
    var unlocks: [Bool] = []
    var wrapped: WrappedFileKey?
    var fileKey: SecretBytes?
    var failure: String?

    init(continuing device: Device) {
        let codes = ["1234", "5678"]
        for code in codes {
            device.lock(immediately: true)
            unlocks.append((try? device.unlock(passcode: secret(code))) != nil)
        }
        guard let working = zip(codes, unlocks).first(where: { $0.1 })?.0 else {
            failure = "no passcode unlocks"
            return
        }
        device.lock(immediately: true)
        do {
            try device.unlock(passcode: secret(working))
            let key = try SecretBytes(randomCount: 32)
            wrapped = try device.wrap(fileKey: key, for: .complete)
            fileKey = key
            try device.changePasscode(old: secret(working), new: secret("2468"))
        } catch {
            failure = "\(error)"
        }
    }
}

/// One operation on a device directory; it boots and arms as it needs.
private struct DeviceOperation {
    let name: String
    var expectsError = false
    let body: (DeviceDirectory, FaultyFileSystem, Fault) throws -> Void
}

/// A device made once, with passcode 1234, copied afresh for every run.
private final class DeviceBench {
    let root: String
    var template: String { root + "/template" }
    private var runs = 0

    init() throws {
        root = scratchDirectory() + "locker-fault-device-" + UUID().uuidString.prefix(8)
        let device = try Device.initialize(at: DeviceDirectory(path: template), passcode: secret("1234"),
                                           options: .init(passcodeCost: fastCost))
        device.shutdown()
    }

    func cleanUp() { try? FileManager.default.removeItem(atPath: root) }

    /// The device's files and their bytes.
    func files(_ directory: String) throws -> [String: Data] {
        var out: [String: Data] = [:]
        for name in try FileManager.default.contentsOfDirectory(atPath: directory) {
            out[name] = try Data(contentsOf: URL(fileURLWithPath: directory + "/" + name))
        }
        return out
    }

    struct Run {
        let directory: String
        let error: (any Error)?
        let calls: [String]
        let faulty: FaultyFileSystem
    }

    func run(_ operation: DeviceOperation, _ fault: Fault) throws -> Run {
        runs += 1
        let directory = root + "/runs/\(runs)"
        try copyTree(template, to: directory)
        let faulty = FaultyFileSystem()
        var failure: (any Error)?
        do {
            try operation.body(DeviceDirectory(path: directory, fileSystem: faulty.fileSystem), faulty, fault)
        } catch {
            failure = error
        }
        return Run(directory: directory, error: failure, calls: faulty.disarm().calls, faulty: faulty)
    }

    /// Counts the calls of `operation`, runs it with every fault, checks
    /// the generic rules, and calls `check` for the operation's own.
    func exercise(_ operation: DeviceOperation, check: (Run, (String) -> Void) throws -> Void) throws {
        let clean = try run(operation, .none)
        if operation.expectsError {
            try #require(clean.error != nil)
        } else {
            try #require(clean.error == nil, "\(operation.name) without a fault: \(clean.error!)")
        }
        let again = try run(operation, .none)
        try #require(again.calls == clean.calls, "\(operation.name): the calls differ between two clean runs")
        try #require(!clean.calls.isEmpty)

        var issues: [String] = []
        var tally = Tally()
        for fault in faultPlan(clean.calls) {
            let run = try run(operation, fault)
            let what = "\(operation.name), \(fault) (\(clean.calls[at(fault) - 1]))"
            func issue(_ text: String) { issues.append("\(what): \(text)") }
            tally.runs += 1
            if let error = run.error {
                if let kind = errorKind(error), error is DeviceError {
                    tally.errors[kind, default: 0] += 1
                } else {
                    issue("not a DeviceError: \(type(of: error)): \(error)")
                }
                if !operation.expectsError {
                    if case .interruptOnce = fault { issue("EINTR was not retried: \(error)") }
                    if case .shortWrite = fault { issue("a short write was not continued: \(error)") }
                }
            } else {
                tally.succeeded += 1
            }
            if !run.faulty.openDescriptors.isEmpty { issue("descriptors left open: \(run.faulty.openDescriptors.sorted())") }
            let held = descriptors(under: run.directory)
            if !held.isEmpty { issue("descriptors into the device: \(held)") }
            let left = temporaries(under: run.directory)
            if !left.isEmpty {
                tally.temporariesLeft += 1
                if !fault.isPersistent { issue("temporaries left: \(left)") }
            }
            try check(run, issue)
            try? FileManager.default.removeItem(atPath: run.directory)
        }
        print(tally.line(operation.name, calls: clean.calls))
        #expect(issues.isEmpty, "\(issues.count) issues:\n\(issues.prefix(40).joined(separator: "\n"))")
    }
}

// MARK: Helpers

/// Where the runs' copies go: tmpfs if there is one, since these tests
/// check what the code does after a fault, not what the disk keeps, and
/// they make thousands of fsyncs.
private func scratchDirectory() -> String {
    var isDirectory: ObjCBool = false
    if FileManager.default.fileExists(atPath: "/dev/shm", isDirectory: &isDirectory), isDirectory.boolValue,
       access("/dev/shm", W_OK) == 0 {
        return "/dev/shm/"
    }
    return NSTemporaryDirectory()
}

/// Whether `error` is a failed fsync of a directory (or the open for it),
/// which, after a rename, leaves the rename's outcome to a crash.
private func isDirectorySyncFailure(_ error: any Error) -> Bool {
    if (error as? StoreError)?.isStoredNotDurable == true { return true }
    guard let error = error as? IOError, error.operation == "fsync" || error.operation == "open" else { return false }
    var isDirectory: ObjCBool = false
    return FileManager.default.fileExists(atPath: error.path, isDirectory: &isDirectory) && isDirectory.boolValue
}

/// The call a fault is aimed at.
private func at(_ fault: Fault) -> Int {
    switch fault {
    case .none: 1
    case .failOnce(let at, _), .failFrom(let at, _), .interruptOnce(let at), .shortWrite(let at): at
    }
}

private func bytes(_ count: Int, seed: Int) -> [UInt8] {
    Array(sampleData(count, seed: seed))
}

private func write(_ store: Store, _ path: String, _ data: [UInt8]) throws {
    try store.put(StorePath(path), bytes: data)
}

/// Every entry of the namespace: directories with their default class,
/// objects with their class, length and a hash of their content.
private func snapshot(_ store: Store) throws -> [String: String] {
    var out: [String: String] = [:]
    try store.walk(.root) { path, _ in
        switch try store.stat(path).kind {
        case .directory(let info):
            out[path.description] = "directory \(info.defaultClass?.canonicalName ?? "-")"
        case .object(let info):
            var hash: UInt64 = 0xcbf2_9ce4_8422_2325
            var length = 0
            try store.read(path) { chunk in
                length += chunk.count
                for byte in chunk { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
            }
            out[path.description] = "object \(info.protectionClass.canonicalName) \(length) \(String(hash, radix: 16))"
        case .damaged(let why):
            out[path.description] = "damaged \(why)"
        }
    }
    return out
}

private func differences(_ a: [String: String], _ b: [String: String]) -> [String] {
    Set(a.keys).union(b.keys).sorted().compactMap { key in
        a[key] == b[key] ? nil : "\(key): \(a[key] ?? "absent") vs \(b[key] ?? "absent")"
    }
}
