import Dispatch
import FoundationEssentials
import Glibc
import LockerStore
import LockerDevice
import LockerFormat
import LockerIO

/// Fetches a store directory tree into a local directory: `get -r`, and
/// `export` of the whole store.
struct TreeFetch {
    let store: Store
    /// Where damaged entries left out are noted.
    let damaged: DamagedObjects

    /// What became of an object or entry, for ``report``.
    enum Outcome {
        /// Written into the tree.
        case written
        /// Left out: its class is locked now.
        case locked(ProtectionClass)
        /// Left out: its class key was reset, so it can never be read.
        case keyReset
        /// Left out: its header, name or data (`what`) does not
        /// authenticate, or (with no entry) the record of a directory
        /// above it.
        case damaged(what: String)

        /// What leaving out an object that `error` says cannot be read
        /// now reports; nil for any other error.
        init?(leavingOut error: any Error) {
            switch error as? DeviceError {
            case .protectedDataUnavailable(let cls)?: self = .locked(cls)
            case .keyReset?: self = .keyReset
            default: return nil
            }
        }
    }

    /// Told of each object, by its store path, and the entry it was
    /// listed as (nil for an entry too damaged to list), on the calling
    /// thread. With it (`export`), an object that cannot be read now is
    /// left out and reported, and the fetch goes on; without it (`get
    /// -r`), such an object stops the fetch.
    var report: ((String, FetchEntry?, Outcome) -> Void)?
    /// The directories never entered: the store's and the device's.
    let fence: DirectoryFence

    init(_ store: Store, fence: DirectoryFence, damaged: DamagedObjects, report: ((String, FetchEntry?, Outcome) -> Void)? = nil) {
        self.store = store
        self.fence = fence
        self.damaged = damaged
        self.report = report
    }

    /// Fetches a tree. Objects are read in groups of up to 256 per
    /// directory, their keys unwrapped together, and written from every
    /// core.
    ///
    /// Into a directory that does not exist yet, the tree is built inside a
    /// temporary directory beside it, made durable with one sync of its
    /// file system and renamed into place: it appears whole or not at all,
    /// and no file needs a rename of its own.
    ///
    /// Into an existing directory, each file is written to a temporary
    /// file beside its target; once 4,096 are waiting (or they are in
    /// ``TreeExport/directoriesPerCommit()`` directories), and at the end,
    /// one sync of each file system written to makes them durable before
    /// they are renamed into place, on a thread of its own while the next
    /// files are fetched, and a last sync makes the renames durable. Every
    /// file is whole or absent.
    ///
    /// Every directory below DEST is opened from the one above it through
    /// no symbolic link, and written into by descriptor
    /// (``LocalDestination``); one that is the store or the device
    /// directory (``fence``) fails the fetch with a usage error (64)
    /// before anything is written into it.
    ///
    /// A new `local` and the directories made for it get `mode`, less the
    /// umask. `finish`, if given, writes into the top of the tree once
    /// every object is in (`export`'s manifest): inside the temporary
    /// directory a new tree is built in, before it is made durable and
    /// renamed (its second argument then true: write the file with
    /// ``LocalDirectory/writeFileOutOfSight(_:mode:_:)``), or into an
    /// existing `local` once the files are renamed into place (false:
    /// write it atomically). Returns how many objects were written.
    func fetch(from source: StorePath, to local: String, mode: UInt32 = 0o777,
               finish: ((LocalDirectory, _ outOfSight: Bool) throws -> Void)? = nil) throws -> Int {
        var st = stat()
        if lstat(local, &st) != 0, errno == ENOENT {
            return try buildNewDirectory(local, mode: mode, fence: fence) { destination, tree in
                let count = try fetchDirectory(source, into: tree, destination, nil)
                try finish?(tree, true)
                return count
            }
        }
        // What is in the way, named as `mkdir -p` would.
        try makeLocalDirectory(local, mode: mode)
        let destination = try LocalDestination(local, fence: fence)
        let export = TreeExport(destination)
        let direct: Int
        do {
            direct = try fetchDirectory(source, into: destination.root, destination, export)
            try export.commitWaiting()
            try export.finishCommit()
            try export.publishStaged()
        } catch {
            export.discard()
            throw error
        }
        export.syncRenames()
        try finish?(destination.root, false)
        return export.count + direct
    }

    /// Fetches the directory `source` into `top`. With an `export`, each
    /// file goes to a temporary name that `export` commits later, and each
    /// directory missing locally is built in a temporary directory that
    /// `export` publishes later, with its files written straight to their
    /// names; without an `export` (inside a new tree's temporary
    /// directory), every file goes straight to its name. Returns how many
    /// files were written straight to their names.
    ///
    /// A damaged object (or a subdirectory whose record is damaged) is
    /// left out, with what it has written of its file removed, and noted
    /// in `damaged`; the rest is fetched. So is an object that cannot be
    /// read now, when ``report`` is set.
    ///
    /// Directories are entered one at a time, depth first, each one's
    /// files written before its subdirectories', with one exception: a
    /// directory's last group of files, if it goes straight to its names
    /// (never through an export) and holds at most 4 MiB, may wait to be
    /// written together with the next directory's first
    /// (``fetchGroups(_:)``), so that threads create files in two
    /// directories, not one (a directory of at most 256 files whose group
    /// was just written with the one before it does not wait: so every
    /// other one, where directories are that small). The listings of the next
    /// two directories are read ahead on a thread of their own
    /// (``ListingsAhead``) while files are written: their headers may wait
    /// on the disk while writing computes (measured with one listing
    /// ahead, `get -r` of 20,000 small objects into a new directory with a
    /// cold page cache, medians of 4: 1.45 s listing then writing, 1.34 s
    /// overlapped). So up to three listings are held (each keeping at most
    /// 8 MiB of small objects' data), with a waiting group.
    ///
    /// A directory waiting its turn is kept by its place, not open, so
    /// that a wide tree holds few descriptors; it is opened again through
    /// no link, and only if it is the directory it was. (The directory of
    /// a waiting group stays open until the group is written: one more.)
    private func fetchDirectory(_ source: StorePath, into top: LocalDirectory,
                                _ destination: LocalDestination, _ export: TreeExport?) throws -> Int {
        let store = self.store
        var count = 0
        let treeExport = export
        // Each directory with where it goes (the top: nil), the path errors
        // give for it if not the one where it goes (one built in a
        // temporary directory: the path it is built for), and the export
        // its files go through: none in a directory being built out of
        // sight.
        var stack: [(source: StorePath, parent: LocalPlace?, name: String, shownAs: String?, seen: FileStatus?, export: TreeExport?)] =
            [(source, nil, "", nil, nil, export)]
        // The listings of the next directories, read ahead in the order
        // they are entered. Two: a directory's last group may wait for the
        // next one's first, and the one after must be ready when that pair
        // is written. Each keeps half the small objects' data a listing
        // keeps otherwise: the three, with a waiting group, keep at most
        // 28 MiB of it, where one listing and the next kept 32 MiB (names
        // and headers, which grow with a directory's size, are held for
        // three listings now, not two). See docs/performance.md, "After
        // pass 23: writers in different directories".
        let ahead = ListingsAhead(store, from: source, count: 2, inlineBudget: Store.fetchInlineBudget / 2)
        defer { ahead.stop() }
        // The last directories written into: the next one's parent is
        // usually one of them.
        var recent: [LocalDirectory] = []
        // A group written with the next directory's first: two threads
        // creating files in one directory take turns at its lock, and while
        // ext4 searches long for free inodes (for minutes after a mass
        // deletion) one spins while the other creates; in two directories
        // they create at once (see Store.orderedForWriting).
        var held: Group?
        /// Writes the groups together, then settles each in turn.
        func write(_ groups: [Group]) throws {
            let results = fetchGroups(groups)
            for (group, results) in zip(groups, results) {
                let local = group.local
                // A damaged object's partial file goes now, as does one
                // that cannot be read now when those are left out; the
                // others are fetched on.
                var written: [WrittenFile] = []
                var failure: (any Error)?
                for (object, result) in zip(group.objects, results) {
                    if let error = result.error as? StoreError, error.isIntegrity {
                        result.written?.remove(in: local)
                        noteDamage(error, object.entry)
                    } else if let report, let error = result.error, let leftOut = Outcome(leavingOut: error) {
                        result.written?.remove(in: local)
                        report(object.path.description, object.entry, leftOut)
                    } else {
                        if let file = result.written { written.append(file) }
                        if let error = result.error {
                            failure = failure ?? error
                        } else {
                            report?(object.path.description, object.entry, .written)
                        }
                    }
                }
                if let export = group.export {
                    export.add(written, in: local)
                    if let failure { throw failure }
                    if export.isFull { try export.commitWaiting() }
                } else {
                    if let failure { throw failure }
                    count += written.count
                }
            }
        }
        while let (source, parentPlace, name, shownAs, seen, export) = stack.popLast() {
            let listing: FetchListing
            do {
                listing = try ahead.listing(of: source)
            } catch let error as StoreError where parentPlace != nil && error.isIntegrity {
                // A subdirectory whose record is damaged: nothing below it
                // can be named, so it is left out whole, and not made.
                if let parentPlace { treeExport?.unstage(name, in: parentPlace) }
                noteDamage(error)
                continue
            }
            listing.damaged.forEach { noteDamage($0) }
            let local: LocalDirectory
            if let parentPlace {
                let parent = try recent.last { $0.place == parentPlace } ?? destination.open(parentPlace)
                // Without an export, it is built out of sight: nothing can
                // be there yet.
                local = try parent.subdirectory(name, new: export == nil, seen: seen, shownAs: shownAs)
                recent = [parent, local]
            } else {
                local = top
                recent = [top]
            }
            try export?.noteDirectory(local)
            for directory in listing.directories.reversed() {
                // Into an existing tree, what is there now; when its turn
                // comes, it must still be there or gone.
                let seen = export == nil ? nil : try local.status(of: directory.name)
                if let export, seen == nil {
                    let (container, staged) = try export.stage(directory.name, in: local)
                    stack.append((directory, container, staged, local.path(of: directory.name), nil, nil))
                } else {
                    stack.append((directory, local.place, directory.name, nil, seen, export))
                }
            }
            let objects = listing.objects
            for start in stride(from: 0, to: objects.count, by: 256) {
                try Interruption.check()
                let group = Group(objects: try prepareReads(Array(objects[start..<min(objects.count, start + 256)])),
                                  local: local, export: export)
                if let waiting = held, group.export == nil {
                    held = nil
                    try write([waiting, group])
                    continue
                }
                if let waiting = held {
                    held = nil
                    try write([waiting])
                }
                if group.mayWait && start + 256 >= objects.count && report == nil {
                    // A directory's last group waits for the next
                    // directory's first, to be written with it. (Not with
                    // a `report`, which `export` gives: its reports, in the
                    // manifest's order, would come out of order.)
                    held = group
                } else {
                    try write([group])
                }
            }
        }
        if let waiting = held {
            held = nil
            try write([waiting])
        }
        return count
    }

    /// Objects of one directory, their reads prepared, to be written into
    /// `local` (through `export`, if any).
    private struct Group {
        let objects: [PreparedRead]
        let local: LocalDirectory
        let export: TreeExport?

        /// Whether it may be written after the next directory is entered:
        /// only files written straight to their names, whose directory
        /// nothing else depends on until the whole tree is published, and
        /// only a few MiB of them, so that what a fetch holds in memory
        /// stays about what it held before (the listing being written and
        /// the next one).
        var mayWait: Bool { export == nil && objects.reduce(0) { $0 + $1.size } <= 4 << 20 }
    }

    /// Writes each object of `groups` to a new file in its group's
    /// directory, several at once, the groups' objects taken in turn (so
    /// that two threads are mostly in different directories): a temporary
    /// file beside its target when the group has an export, else the
    /// target itself. Each group's results hold, for each object, the file
    /// written (if one was created) and the error, if any.
    private func fetchGroups(_ groups: [Group]) -> [[(written: WrittenFile?, error: (any Error)?)]] {
        typealias Result = (written: WrittenFile?, error: (any Error)?)
        // The objects in the order they are taken: the first of each
        // group, then the second of each, and so on.
        let order = takingTurns(groups.indices.map { g in groups[g].objects.indices.map { (group: g, index: $0) } })
        // Each iteration writes only its own slot of a buffer allocated up
        // front (not an array, whose elements threads may not write at once).
        let slots = UnsafeMutableBufferPointer<Result>.allocate(capacity: order.count)
        slots.initialize(repeating: (nil, nil))
        defer { slots.deinitialize().deallocate() }
        let shared = UncheckedGroups(store: store, groups: groups, order: order, slots: slots)
        DispatchQueue.concurrentPerform(iterations: order.count) { i in
            let (g, index) = shared.order[i]
            let group = shared.groups[g]
            let object = group.objects[index]
            let local = group.local
            let temporaries = group.export != nil
            let target = object.path.name
            let temporary = temporaries ? ".locker-" + UUID().uuidString + ".tmp" : target
            do {
                try Interruption.check()
            } catch {
                shared.slots[i].error = error
                return
            }
            let fd: Int32
            var token: Int?
            do throws(IOError) {
                if temporaries {
                    // Removed by the signal handling too, should the
                    // process have to end before it is renamed.
                    (fd, token) = try Interruption.creatingTemporary(temporary, in: local.directory.fd) { () throws(IOError) -> Int32 in
                        try local.directory.createFile(temporary)
                    }
                } else {
                    fd = try local.directory.createFile(temporary)
                }
            } catch {
                shared.slots[i].error = CommandFailure.cannot("write \(local.path(of: target))", error.errno)
                return
            }
            shared.slots[i].written = WrittenFile(temporary: temporary, target: target, token: token)
            defer { Glibc.close(fd) }
            do {
                let out = OutputFile(fd: fd, name: temporary, in: local.directory, size: object.size)
                try out.writeInOrder(name: local.path(of: target)) { try shared.store.read(object, into: $0) }
            } catch {
                shared.slots[i].error = error
            }
        }
        var results = groups.map { [Result](repeating: (nil, nil), count: $0.objects.count) }
        for (i, (g, index)) in order.enumerated() { results[g][index] = slots[i] }
        return results
    }

    /// What the threads of ``fetchGroups(_:)`` share: `Store` is safe to
    /// use from several threads, and each thread reads its own objects and
    /// writes its own slot.
    private struct UncheckedGroups: @unchecked Sendable {
        let store: Store
        let groups: [Group]
        let order: [(group: Int, index: Int)]
        let slots: UnsafeMutableBufferPointer<(written: WrittenFile?, error: (any Error)?)>
    }

    private func noteDamage(_ error: StoreError, _ entry: FetchEntry? = nil) {
        damaged.note(error)
        if case .integrity(let path, let what) = error { report?(path, entry, .damaged(what: what)) }
    }

    /// The group's keys, unwrapped together (``Store/prepareReads(_:)``).
    /// With ``report`` set, if that fails for an object that cannot be
    /// read now, each is prepared on its own, and those that cannot be
    /// read now are reported and left out.
    private func prepareReads(_ entries: [FetchEntry]) throws -> [PreparedRead] {
        do {
            return try store.prepareReads(entries)
        } catch where report != nil && Outcome(leavingOut: error) != nil {
            return try entries.compactMap { entry in
                do {
                    return try store.prepareReads([entry]).first
                } catch {
                    guard let leftOut = Outcome(leavingOut: error) else { throw error }
                    report?(entry.path.description, entry, leftOut)
                    return nil
                }
            }
        }
    }
}
