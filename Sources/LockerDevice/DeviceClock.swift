/// Where the device reads the time. Grace periods and passcode delays are
/// measured with it, so tests inject a clock they advance by hand; the
/// shipped tool always uses ``SystemClock``.
public protocol DeviceClock: Sendable {
    /// Seconds since 1970-01-01T00:00:00Z.
    func now() -> Double
}

#if canImport(Glibc)
internal import Glibc
#endif

/// The real-time clock.
public struct SystemClock: DeviceClock {
    public init() {}

    public func now() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }
}
