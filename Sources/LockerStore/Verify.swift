internal import Glibc
internal import LockerDevice
internal import LockerFormat
internal import LockerIO
internal import FoundationEssentials

/// The result of ``Store/verify(readData:repair:progress:)``.
public struct VerifyReport: Sendable {
    public struct Problem: Sendable, Equatable {
        /// The store path, or the file inside the store directory when no
        /// path can be named.
        public var location: String
        public var reason: String
    }

    /// Objects whose headers (and, with `readData`, every chunk) check out.
    public var objectsChecked = 0
    /// Objects whose data was authenticated chunk by chunk.
    public var objectsReadInFull = 0
    public var directoriesChecked = 0
    /// Objects whose class is not readable now, so their data was not read.
    public var notChecked: [Problem] = []
    /// Damaged entries: the store paths and why.
    public var damaged: [Problem] = []
    /// Provable garbage: temporary files of interrupted writes and data
    /// files no header references (and no live writer holds).
    public var garbage: [String] = []
    /// Garbage removed by `repair`.
    public var removed: [String] = []

    public var isClean: Bool { damaged.isEmpty && garbage.count == removed.count }
}

extension Store {
    /// Checks the store's structure: every directory record, every name,
    /// every object header (sealed, bound to its place, with a data file of
    /// the recorded size or as much data inline), and finds garbage. With `readData`, also
    /// authenticates every chunk of every object whose class is readable
    /// now. With `repair`, removes the garbage and only the garbage:
    /// nothing that might be recovered is deleted.
    public func verify(readData: Bool = false, repair: Bool = false,
                       progress: ((_ done: Int, _ total: Int) -> Void)? = nil) throws -> VerifyReport {
        var report = VerifyReport()
        // The store lock keeps a put from committing a header between the
        // scan of references and the removal of unreferenced data.
        // (Not lockStore(): verify reports an interrupted move and only
        // --repair settles it.)
        let lock = try FileLock.store(path: lockPath, fileSystem: fs)
        defer { withExtendedLifetime(lock) {} }

        var intent: MoveIntent?
        if try fs.status(intentPath) != nil {
            intent = try pendingMoveIntent()
            if intent == nil {
                report.damaged.append(.init(location: relative(intentPath), reason: "move intent failed authentication"))
            }
        }
        // The old name of an interrupted move, when both names are there.
        let staleName = try intent.flatMap { try moveLeftBothNames($0) ? $0.source : nil }

        var referenced: [String: String] = [:]
        var objects: [(StorePath, ObjectHeader)] = []
        var temporaries: [String] = []

        func scan(_ directory: Directory) {
            report.directoriesChecked += 1
            guard let names = try? fs.contentsOfDirectory(directory.fsPath) else {
                report.damaged.append(.init(location: directory.storePath.description, reason: "directory unreadable"))
                return
            }
            for fileName in names.sorted() where fileName != ".dir" {
                let fsPath = directory.fsPath + "/" + fileName
                if Self.isTemporary(fileName) {
                    temporaries.append(fsPath)
                    continue
                }
                let isDirectory = (try? kind(of: fsPath)) == .directory
                let name = entryName(fileName, at: fsPath, isDirectory: isDirectory, in: directory)
                guard let name else {
                    // As ls names it, and rm takes it.
                    report.damaged.append(.init(location: directory.storePath.appending("?" + fileName).description,
                                                reason: "name failed authentication"))
                    continue
                }
                let itemPath = directory.storePath.appending(name)
                if isDirectory {
                    do {
                        let record = try readDirectoryRecord(fsPath, path: itemPath, in: directory.record.directoryID)
                        scan(Directory(fsPath: fsPath, record: record, storePath: itemPath))
                    } catch {
                        report.damaged.append(.init(location: itemPath.description, reason: "directory record failed authentication, or belongs to another directory"))
                    }
                    continue
                }
                do {
                    let header = try readHeader(fsPath, name: name, in: directory, path: itemPath)
                    let id = Hex.lowercase(header.objectID)
                    if relative(fsPath) == staleName {
                        // Garbage, not damage: the move's new name holds
                        // the object.
                        continue
                    }
                    if let other = referenced[id] {
                        report.damaged.append(.init(location: itemPath.description, reason: "shares its data file with \(other)"))
                        continue
                    }
                    referenced[id] = itemPath.description
                    if header.isInline {
                        // Its length was checked as the header was opened;
                        // a full read reads it again (the list stays small).
                        objects.append((itemPath, header.droppingInlineData()))
                    } else if let data = try? fs.status(dataPath(header.objectID)) {
                        if data.size != header.dataLength {
                            report.damaged.append(.init(location: itemPath.description,
                                                        reason: "data file is \(data.size) bytes, header says \(header.dataLength)"))
                        } else {
                            objects.append((itemPath, header))
                        }
                    } else {
                        report.damaged.append(.init(location: itemPath.description, reason: "data file missing"))
                    }
                } catch StoreError.integrity(_, let what) {
                    report.damaged.append(.init(location: itemPath.description, reason: what))
                } catch {
                    report.damaged.append(.init(location: itemPath.description, reason: "header unreadable"))
                }
            }
        }

        do {
            scan(try rootDirectory())
        } catch {
            report.damaged.append(.init(location: "/", reason: "root directory record failed authentication"))
        }
        report.objectsChecked = objects.count

        // Unreferenced data is garbage only when every entry was read: a
        // damaged name, record or header may be the one that refers to it,
        // and its object may still be recovered.
        let structureIntact = report.damaged.isEmpty
        for name in (try? fs.contentsOfDirectory(dataDirectory)) ?? [] {
            let fsPath = dataDirectory + "/" + name
            // A name no data file is given was put there by something
            // else: not the store's to remove, whatever it holds.
            guard Self.isDataFileName(name) else {
                report.notChecked.append(.init(location: relative(fsPath), reason: "not a data file's name: left as it is"))
                continue
            }
            guard referenced[name] == nil, !DataFile.isInUse(fsPath, fileSystem: fs) else { continue }
            if structureIntact {
                report.garbage.append(relative(fsPath))
            } else {
                report.notChecked.append(.init(location: relative(fsPath),
                                               reason: "unreferenced data kept: a damaged entry may refer to it"))
            }
        }
        // Beside the store's own entries, a file another program put in the
        // store directory is not the store's to read or remove, but it is
        // named (as not checked): plaintext left there must not go unseen.
        for name in ((try? fs.contentsOfDirectory(path)) ?? []).sorted()
        where !Self.layoutNames.contains(name) && !Self.isLayoutTemporary(name) {
            report.notChecked.append(.init(location: name, reason: "not the store's: left as it is"))
        }
        if intent != nil {
            // The old name first: removing the intent before it would
            // leave two names and nothing to tell them apart.
            if let staleName { report.garbage.append(staleName) }
            report.garbage.append(relative(intentPath))
        }
        // A batch writer's header temporaries are not locked one by one:
        // it shares the staging lock while it has them. Held here, no
        // batch begins until verify ends; held by a writer, no header
        // temporary is provably garbage (a crash's look the same).
        let staging = try FileLock.stagingIfIdle(path: stagingPath, fileSystem: fs)
        defer { withExtendedLifetime(staging) {} }
        for fsPath in temporaries + ((try? fs.contentsOfDirectory(path))?.filter { $0.hasPrefix("lock.tmp-") || $0.hasPrefix("move.intent.tmp-") }.map { path + "/" + $0 } ?? [])
        where !DataFile.isInUse(fsPath, fileSystem: fs) {
            if staging == nil, isHeaderTemporary(fsPath) { continue }
            report.garbage.append(relative(fsPath))
        }

        if readData {
            let status = try keys.status()
            for (i, (itemPath, header)) in objects.enumerated() {
                progress?(i, objects.count)
                do {
                    try read(itemPath) { _ in }
                    report.objectsReadInFull += 1
                } catch DeviceError.protectedDataUnavailable {
                    report.notChecked.append(.init(location: itemPath.description,
                                                   reason: "locked: \(header.protectionClass.canonicalName) is unavailable while \(status.state.rawValue)"))
                } catch DeviceError.keyReset {
                    report.notChecked.append(.init(location: itemPath.description, reason: "keyReset: its class key was reset"))
                } catch StoreError.integrity(_, let what) {
                    report.damaged.append(.init(location: itemPath.description, reason: what))
                } catch DeviceError.integrity(let what) {
                    report.damaged.append(.init(location: itemPath.description, reason: what))
                } catch let error as IOError where [EIO, ENODATA, EUCLEAN, EBADMSG].contains(error.errno) {
                    // One object the disk cannot give back is reported, and
                    // the others are still read: the report is what verify
                    // is for. (A shortage of descriptors or memory is not
                    // the object's damage, and still stops it.)
                    report.damaged.append(.init(location: itemPath.description, reason: "its data cannot be read: \(error)"))
                }
            }
            progress?(objects.count, objects.count)
        }

        if repair {
            let dataPrefix = relative(dataDirectory) + "/"
            // Data files a writer locked after the scan: not garbage.
            var inUseSinceScan: Set<String> = []
            for item in report.garbage {
                if item == relative(intentPath) {
                    // Settled, not only removed: a directory's record may
                    // still name the place it moved from (the stale name
                    // of an object move is gone already, just above).
                    try settleInterruptedMove()
                } else if item == staleName {
                    // Synced before the intent goes: after a crash, an
                    // intent removed durably while the old name's removal
                    // was not would leave two names and nothing to say
                    // which one is old.
                    try fs.remove(path + "/" + item)
                } else if item.hasPrefix(dataPrefix) {
                    // A put may have made this file just before the scan
                    // and locked it since: removed only while verify holds
                    // its lock, and left if the put does.
                    guard try DataFile.removeIfUnused(path + "/" + item, fileSystem: fs) else {
                        inUseSinceScan.insert(item)
                        continue
                    }
                } else {
                    // A directory left by an interrupted mkdir or rm is
                    // outside the namespace, so everything in it is
                    // garbage too.
                    try fs.removeTree(path + "/" + item)
                }
                report.removed.append(item)
            }
            report.garbage.removeAll { inUseSinceScan.contains($0) }
        }
        return report
    }

    func relative(_ fsPath: String) -> String {
        fsPath.hasPrefix(path + "/") ? String(fsPath.dropFirst(path.count + 1)) : fsPath
    }
}
