/// Where the store notes what it writes under temporary names: data
/// files no header refers to yet, the temporaries of headers, directory
/// records and the move intent
/// (``FileSystem/writeFileAtomically(_:_:mode:syncDirectory:temporaries:finishing:)``),
/// the temporary directories new directories are built in (a staged
/// tree's among them).
/// A process that must end before the store has put them in place or
/// removed them (the CLI, on a second Ctrl-C or when its grace after the
/// first runs out) runs the cleanups registered here, and leaves none of
/// them behind, from whichever thread wrote them.
///
/// The store creates each temporary and registers its cleanup as one
/// step, and puts it in place (or removes it) and unregisters the cleanup
/// as one step, each inside ``holdingOffCleanups(_:)``: a cleanup never
/// runs between the two halves, so it never removes what has become part
/// of the store, and nothing the store creates escapes it. A process
/// that cannot wait for a step to end (its disk does not answer) skips
/// the cleanups of what that step is putting in place
/// (``markPlacing(_:_:)``): it may leave garbage, never remove data.
public protocol TemporaryCleanups: Sendable {
    /// Runs `body` with no cleanup running meanwhile: either the cleanups
    /// have run (the process is ending, and this may wait for ever) or
    /// they run after `body` has returned. `body` must call nothing of
    /// this but ``registerCleanup(_:)`` and ``unregisterCleanup(_:)``.
    func holdingOffCleanups<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T

    /// Registers `cleanup`, which removes one temporary, to run if the
    /// process must end before the store removes or renames it. It may
    /// run on another thread, at the same time as the store's own
    /// removal. Returns the token for ``unregisterCleanup(_:)``.
    func registerCleanup(_ cleanup: @escaping @Sendable () -> Void) -> Int

    func unregisterCleanup(_ token: Int)

    /// Marks the temporaries registered as `tokens` as being put in place
    /// (`placing` true), or no longer (false). A process that ends
    /// without waiting for the store to finish a step (a thread stuck on
    /// a disk that does not answer) leaves a marked temporary where it is
    /// rather than run its cleanup, which could remove what the temporary
    /// has just become: an object's data, a published directory. Leaving
    /// it costs garbage that `verify --repair` removes.
    func markPlacing(_ tokens: [Int], _ placing: Bool)
}

extension TemporaryCleanups {
    /// Creates a temporary with `create` and registers the cleanup that
    /// `cleanup` makes for it, as one step: a process that ends meanwhile
    /// has either not created it or removes it. Returns what `create` made
    /// and the token for ``unregisterCleanup(_:)``.
    public func creatingTemporary<T, E: Error>(_ create: () throws(E) -> T,
                                               cleanup: (T) -> @Sendable () -> Void) throws(E) -> (made: T, token: Int) {
        try holdingOffCleanups { () throws(E) in
            let made = try create()
            return (made, registerCleanup(cleanup(made)))
        }
    }

    /// ``holdingOffCleanups(_:)`` for a `body` that puts the temporaries
    /// registered as `tokens` in place, or moves things out of them: they
    /// are marked as being placed (``markPlacing(_:_:)``) from before
    /// the hold until after it.
    public func holdingOffCleanups<T, E: Error>(placing tokens: [Int?], _ body: () throws(E) -> T) throws(E) -> T {
        let marked = tokens.compactMap { $0 }
        markPlacing(marked, true)
        defer { markPlacing(marked, false) }
        return try holdingOffCleanups(body)
    }

    /// Runs `body`, which puts the temporaries registered as `tokens` in
    /// their place, or removes them, and if it returns, unregisters their
    /// cleanups, as one step: a cleanup never runs once its temporary is
    /// what it became (it would take a data file from the object just
    /// committed, or empty a directory just published). If `body` throws,
    /// the cleanups stay registered.
    public func finishingTemporaries<T, E: Error>(_ tokens: [Int?], _ body: () throws(E) -> T) throws(E) -> T {
        try holdingOffCleanups(placing: tokens) { () throws(E) in
            let result = try body()
            for case let token? in tokens { unregisterCleanup(token) }
            return result
        }
    }
}

/// No process to end early: nothing is registered, and nothing is held
/// off. What a store, and a file system's atomic write, use unless given
/// other ``TemporaryCleanups``.
public struct NoTemporaryCleanups: TemporaryCleanups {
    public init() {}

    public func holdingOffCleanups<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T { try body() }

    public func registerCleanup(_ cleanup: @escaping @Sendable () -> Void) -> Int { 0 }

    public func unregisterCleanup(_ token: Int) {}

    public func markPlacing(_ tokens: [Int], _ placing: Bool) {}
}
