internal import LockerCrypto
internal import LockerDevice
public import LockerFormat
internal import FoundationEssentials

/// What ``Store/listForFetch(_:inlineBudget:)`` found in a directory.
public struct FetchListing {
    public let directories: [StorePath]
    public let objects: [FetchEntry]
    /// The entries that are damaged (a name or a header that does not
    /// authenticate), each as the ``StoreError/integrity(path:what:)``
    /// reading it threw, in no particular order.
    public let damaged: [StoreError]
}

/// An object whose header was read and checked, listed for fetching.
public struct FetchEntry {
    public let path: StorePath
    let header: ObjectHeader
    /// Where the header file is, to read it again when its inline data
    /// was not kept (the listing's budget was spent).
    let fsPath: String
    let directory: Store.Directory

    public var protectionClass: ProtectionClass { header.protectionClass }
    public var protectionSource: ProtectionSource { header.protectionSource }
    /// The plaintext size.
    public var size: UInt64 { header.plaintextLength }
    /// Nanoseconds since 1970.
    public var created: Int64 { header.created }
    public var modified: Int64 { header.modified }
}

/// An object whose header was read and whose file key was unwrapped by
/// ``Store/prepareReads(_:)``, ready for ``Store/read(_:into:)``.
public struct PreparedRead {
    public let path: StorePath
    /// The plaintext size.
    public var size: UInt64 { header.plaintextLength }
    /// The entry it was listed as.
    public let entry: FetchEntry
    var header: ObjectHeader { entry.header }
    let fileKey: SecretBytes
    /// Shared by the class C and D objects of one ``Store/prepareReads(_:)``
    /// call, whose keys were unwrapped together: its clock started then.
    let recheck: KeyRecheck?
}

extension Store {
    /// Unwraps the file keys of entries listed by ``listForFetch(_:inlineBudget:)``
    /// together (one request to the agent per 256 keys). Throws what
    /// ``read(_:range:into:)`` would throw for the first entry that cannot
    /// be read now. Class A and B keys are asked for again when each
    /// object is read (see ``read(_:into:)``).
    public func prepareReads(_ entries: [FetchEntry]) throws -> [PreparedRead] {
        let headers = entries.map(\.header)
        let fileKeys: [SecretBytes]
        do {
            fileKeys = try keys.unwrap(headers.map(\.wrappedKey))
        } catch {
            // One at a time: an open object's key comes from the device,
            // and otherwise the first object that cannot be read now
            // throws its own error.
            fileKeys = try headers.map { try fileKey(for: $0) }
        }
        guard fileKeys.count == headers.count else { throw DeviceError.integrity("the agent gave the wrong number of file keys") }
        // The batch's C and D keys are used after they were unwrapped, for
        // as long as the batch takes: a reboot or a wipe meanwhile must
        // stop it, so one key of each such class is asked for again, at
        // most every interval. (A and B keys are asked for per object.)
        let probes = [ProtectionClass.completeUntilFirstUserAuthentication, .none].compactMap { cls in
            headers.first { $0.protectionClass == cls }?.wrappedKey
        }
        let recheck = probes.isEmpty ? nil : KeyRecheck { [keys] in _ = try keys.unwrap(probes) }
        return entries.indices.map {
            PreparedRead(path: entries[$0].path, entry: entries[$0], fileKey: fileKeys[$0], recheck: recheck)
        }
    }

    /// A directory's entries for fetching it whole, in one pass: its
    /// subdirectories, and its objects with their headers read and
    /// checked. A damaged entry is listed in ``FetchListing/damaged``, so
    /// that a fetch can go on with the others; a damaged record of the
    /// directory itself throws ``StoreError/integrity(path:what:)``.
    /// The entries are looked at on all cores (a header read may wait for
    /// the disk, and each name and header is opened with AES-GCM).
    /// At most `inlineBudget` bytes of small objects' data are kept with
    /// their headers; the rest is read again when written.
    public func listForFetch(_ path: StorePath, inlineBudget: Int = Store.fetchInlineBudget) throws -> FetchListing {
        let directory = try self.directory(at: path)
        let entries = try listedEntries(of: directory)
        enum Found {
            case directory(StorePath)
            case object(StorePath, ObjectHeader, fsPath: String)
        }
        // A window of entries at a time: what is read but not yet kept
        // stays bounded whatever the directory's size.
        let window = 128
        let found = UnsafeMutableBufferPointer<Result<Found, any Error>?>.allocate(capacity: window)
        found.initialize(repeating: nil)
        defer { found.deinitialize().deallocate() }
        var directories: [StorePath] = []
        var objects: [FetchEntry] = []
        var damaged: [StoreError] = []
        // Small objects' data comes with their headers; a listing keeps at
        // most this much of it, so a huge directory does not fill memory.
        var inlineBudget = inlineBudget
        for start in stride(from: 0, to: entries.count, by: window) {
            let count = min(window, entries.count - start)
            // Each iteration writes only its own slot.
            let slots = Unchecked(found)
            // Four times the cores: a header not in the page cache is
            // read at the disk's pace, and several reads in flight keep
            // it busy (measured, `get -r` of 20,000 small objects with a
            // cold cache, medians of 5: 1.56 s with twice the cores, 1.34 s
            // with four times, 1.41 s with eight times).
            try forEachObject(count, threadsPerWorker: 4) { i in
                let listed = entries[start + i]
                slots.value[i] = Result {
                    let entry = try resolveEntry(listed, in: directory)
                    guard let itemPath = entry.path else {
                        throw StoreError.integrity(path: path.appending("?" + listed.name).description, what: "name failed authentication")
                    }
                    if entry.isDirectory { return .directory(itemPath) }
                    return .object(itemPath, try readHeader(entry.fsPath, name: itemPath.name, in: directory, path: itemPath),
                                   fsPath: entry.fsPath)
                }
            }
            for i in 0..<count {
                let result = found[i]!
                found[i] = nil
                let entry: Found
                do {
                    entry = try result.get()
                } catch let error as StoreError where error.isIntegrity {
                    damaged.append(error)
                    continue
                }
                switch entry {
                case .directory(let itemPath):
                    directories.append(itemPath)
                case .object(let itemPath, var header, let fsPath):
                    if let inline = header.inlineData {
                        if inline.count <= inlineBudget {
                            inlineBudget -= inline.count
                        } else {
                            header = header.droppingInlineData()
                        }
                    }
                    objects.append(FetchEntry(path: itemPath, header: header, fsPath: fsPath, directory: directory))
                }
            }
        }
        // Every entry has the same parent, so the names give the paths'
        // order; sorting indices moves no entry (each is large) until the
        // one pass that puts them in order (measured: sorting the entries
        // by their paths' descriptions was 7% of a `get -r`'s CPU).
        return FetchListing(directories: directories.sorted { $0.name < $1.name },
                            objects: objects.indices.sorted { objects[$0].path.name < objects[$1].path.name }.map { objects[$0] },
                            damaged: damaged)
    }

    /// Reads a prepared object whole into `sink`, as ``read(_:range:into:)``
    /// does (and through it, should the object have been replaced since
    /// it was prepared).
    ///
    /// A class A or B object's key is asked of the device again here, not
    /// taken from the batch: a lock whose grace ended after the batch was
    /// prepared must stop the fetch of every such object not yet started,
    /// as it stops a single `read` (an open class B object still reads).
    public func read(_ prepared: PreparedRead, into sink: (UnsafeRawBufferPointer) throws -> Void) throws {
        var header = prepared.header
        let fileKey: SecretBytes
        let recheck: KeyRecheck?
        switch header.protectionClass {
        case .complete, .completeUnlessOpen: (fileKey, recheck) = (try self.fileKey(for: header), nil)
        case .completeUntilFirstUserAuthentication, .none: (fileKey, recheck) = (prepared.fileKey, prepared.recheck)
        }
        if header.inlineDataDropped {
            let entry = prepared.entry
            guard let again = try? readHeader(entry.fsPath, name: prepared.path.name, in: entry.directory, path: prepared.path),
                  again.objectID == header.objectID
            else { return try read(prepared.path, into: sink) }
            header = again
        }
        if try readData(prepared.path, header: header, fileKey: fileKey, range: nil, recheck: recheck, { try $0.read($1, into: sink) }) {
            return
        }
        try read(prepared.path, into: sink)
    }

    /// The inline data one ``listForFetch(_:inlineBudget:)`` keeps unless
    /// told otherwise.
    public static let fetchInlineBudget = 16 << 20
}
