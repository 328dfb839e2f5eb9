/// Why a store operation was refused. Device-side refusals
/// (`protectedDataUnavailable`, `keyReset`, …) arrive as `DeviceError`.
public enum StoreError: Error, Equatable, Sendable {
    /// A path the store does not accept (`..`, empty component, NUL, too
    /// long). The string says why.
    case invalidPath(String)
    case notFound(String)
    case alreadyExists(String)
    case notADirectory(String)
    case isADirectory(String)
    case directoryNotEmpty(String)
    /// Stored bytes failed authentication or validation. Names the path,
    /// and in `what` what is wrong with which structure, as a clause
    /// ("header failed authentication", "data file missing"), never the
    /// byte.
    case integrity(path: String, what: String)
    /// The store directory belongs to another device (or one that was
    /// wiped).
    case foreignStore
    /// No store directory at this path, and the operation does not create
    /// one.
    case noStore(String)
    /// The directory at this path holds files that are not a store's.
    case notAStore(String)
    /// Another command changed the directory at `path` while this one
    /// worked in it: `what` says how ("moved or removed it", "kept storing
    /// objects in it"). Running the command again once the other has ended
    /// settles it.
    case changedMeanwhile(path: String, what: String)
    /// One of the store's own entries (`ns`, `data`, `lock`, `staging`,
    /// `move.intent`) at `path` is not what a store makes there: `what`
    /// says what it is instead (a symbolic link, not a directory, …).
    /// Nothing was read, written or removed through it.
    case damagedLayout(path: String, what: String)
    /// The object at `path` was stored: its new version is in place and
    /// readable. But the sync that makes its name durable failed
    /// (`reason`, the system's), so a crash may yet take it back to its
    /// old version, or to nothing. Storing it again once the disk is
    /// mended makes sure of it.
    case storedNotDurable(path: String, reason: String)
    /// The object is larger than an object may be (`maxLength` bytes at
    /// its chunk size: ``ChunkLayout/maxChunkCount`` chunks). Nothing of
    /// it was stored.
    case objectTooLarge(maxLength: UInt64)
}

extension StoreError {
    /// Whether this is ``integrity(path:what:)``: damage to one stored
    /// item, which a command over many items may report and go past.
    public var isIntegrity: Bool {
        if case .integrity = self { return true }
        return false
    }

    /// Whether this is ``storedNotDurable(path:reason:)``: the object was
    /// stored, and only its durability is in doubt.
    public var isStoredNotDurable: Bool {
        if case .storedNotDurable = self { return true }
        return false
    }
}
