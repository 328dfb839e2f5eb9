/// Where the device reads the time. Grace periods (on ``elapsed()``) and
/// passcode delays (on ``now()``, which the device record keeps across
/// boots) are measured with it, so tests inject a clock they advance by hand; the
/// shipped tool always uses ``SystemClock``.
public protocol DeviceClock: Sendable {
    /// Seconds since 1970-01-01T00:00:00Z.
    func now() -> Double

    /// Seconds since any fixed start, on a clock that setting the time
    /// does not move and that goes on while the machine sleeps: what a
    /// grace period is measured on, so that a clock set back does not
    /// lengthen it. By default ``now()``: a clock moved by hand moves both.
    func elapsed() -> Double
}

extension DeviceClock {
    public func elapsed() -> Double { now() }
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

    /// `CLOCK_BOOTTIME`: monotonic, and counting a suspend.
    public func elapsed() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_BOOTTIME, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }
}
