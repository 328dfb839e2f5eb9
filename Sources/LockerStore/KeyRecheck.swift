internal import FoundationEssentials
internal import LockerIO

/// Asks the device again, during a long read, whether the object's key is
/// still to be had: at most once per ``interval``, before a batch or run
/// of chunks is opened.
///
/// The file key of a read is unwrapped once, when the read starts. A
/// class A object must stop being readable when the grace period after a
/// lock ends, even by a read already under way (as an open class A file
/// does on a locked iPhone), and nothing is readable after a reboot that
/// has not been followed by an unlock, or after a wipe. So a read that
/// outlasts the interval asks again, and the first refusal ends it with
/// the device's error. Reads shorter than the interval never ask.
final class KeyRecheck: @unchecked Sendable {
    /// How long a read goes on with a key the device was last asked for.
    static let interval: Duration = .milliseconds(500)

    private let lock = Lock()
    private let ask: () throws -> Void
    private let clock = ContinuousClock()
    private var last: ContinuousClock.Instant

    /// `ask` throws if the device no longer gives the key.
    init(_ ask: @escaping () throws -> Void) {
        self.ask = ask
        last = clock.now
    }

    /// Asks the device if the last answer is older than ``interval``.
    /// Threads that come while one asks wait for its answer.
    func pass() throws {
        try lock.withLock {
            let now = clock.now
            guard now - last >= Self.interval else { return }
            try ask()
            last = clock.now
        }
    }
}
