internal import Dispatch
internal import FoundationEssentials
internal import LockerIO

/// The listings of a tree's directories (``Store/listForFetch(_:inlineBudget:)``),
/// read on a thread of its own in the order a fetch of the tree (`get -r`)
/// enters them: depth first from the top, a directory's subdirectories in
/// the order of its listing, each with everything below it before the next. At most `count`
/// listings wait to be taken; the next is read as soon as one is.
///
/// A listing that fails is handed on as its error, and nothing below that
/// directory is listed (the fetch does not enter it). Asked for another
/// directory than the next in that order, it stops reading ahead, and
/// every listing from then on is read when asked for.
///
/// Must be stopped (``stop()``): until then its thread holds it, and up to
/// `count` listings.
public final class ListingsAhead: @unchecked Sendable {
    private let store: Store
    private let inlineBudget: Int
    private let condition = Condition()
    private let done = DispatchGroup()
    // Guarded by `condition`:
    private var ready: [(path: StorePath, listing: Result<FetchListing, any Error>)] = []
    private var finished = false
    private var stopped = false

    /// Starts reading from `top`, at most `count` (at least 1) ahead, each
    /// listing keeping at most `inlineBudget` bytes of small objects' data.
    /// If its thread cannot be started, every listing is read when asked
    /// for.
    public convenience init(_ store: Store, from top: StorePath, count: Int, inlineBudget: Int = Store.fetchInlineBudget) {
        self.init(store, from: top, count: count, inlineBudget: inlineBudget) {
            DetachedThread.start($0)
        }
    }

    /// As the public initializer, with `startThread` starting the thread
    /// that reads ahead and saying whether it did (tests make it fail).
    init(_ store: Store, from top: StorePath, count: Int, inlineBudget: Int,
         startThread: (@escaping @Sendable () -> Void) -> Bool) {
        precondition(count > 0, "at least one listing ahead")
        self.store = store
        self.inlineBudget = inlineBudget
        done.enter()
        let started = startThread { [self] in
            defer {
                condition.withLock {
                    finished = true
                    condition.broadcast()
                }
                done.leave()
            }
            var stack = [top]
            while let path = stack.popLast() {
                let stop = condition.withLock {
                    while ready.count >= count && !stopped { condition.wait() }
                    return stopped
                }
                if stop { return }
                let listing = Result { try store.listForFetch(path, inlineBudget: inlineBudget) }
                if case .success(let found) = listing { stack.append(contentsOf: found.directories.reversed()) }
                let kept = condition.withLock {
                    guard !stopped else { return false }
                    ready.append((path, listing))
                    condition.broadcast()
                    return true
                }
                if !kept { return }
            }
        }
        if !started {
            // Nothing ahead: `listing(of:)` finds it finished and reads
            // what it is asked for.
            finished = true
            done.leave()
        }
    }

    /// Whether it still reads ahead: not stopped, and never asked out of
    /// order.
    public var isReadingAhead: Bool { condition.withLock { !stopped } }

    /// The listing of `path`, or the error reading it gave.
    public func listing(of path: StorePath) throws -> FetchListing {
        let next = condition.withLock {
            while ready.isEmpty && !finished && !stopped { condition.wait() }
            defer { condition.broadcast() }
            return ready.isEmpty ? nil : ready.removeFirst()
        }
        if let next, next.path == path { return try next.listing.get() }
        stop()
        return try store.listForFetch(path, inlineBudget: inlineBudget)
    }

    /// Reads no more ahead, and returns once the listing being read, if
    /// any, is done.
    public func stop() {
        condition.withLock {
            stopped = true
            ready.removeAll()
            condition.broadcast()
        }
        done.wait()
    }
}
