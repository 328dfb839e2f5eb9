// The few numbers and columns the CLI lays out, written here rather than
// with `String(format:)`, which would link the whole of Foundation (and
// ICU) into every `locker` call for three progress and status lines.

/// `value` with `decimals` (0 to 9) digits after the point: `value`
/// times 10^`decimals`, rounded to nearest with halves away from zero.
/// That is what `%.Nf` prints but near a tie, where the last digit may
/// be one more (`%.1f` rounds the exact binary value, and an exact tie to
/// even: 0.25 is "0.2" there and "0.3" here). No "-" is written for a
/// value that rounds to zero. A value that is not finite, or too large
/// for an `Int` once scaled, is written as Swift writes it.
func fixedPoint(_ value: Double, decimals: Int) -> String {
    let decimals = min(max(decimals, 0), 9)
    var scale = 1
    for _ in 0..<decimals { scale *= 10 }
    let scaledValue = (abs(value) * Double(scale)).rounded(.toNearestOrAwayFromZero)
    guard scaledValue.isFinite, scaledValue < 9e18 else { return "\(value)" }
    let scaled = Int(scaledValue)
    let sign = value < 0 && scaled != 0 ? "-" : ""
    let whole = sign + String(scaled / scale)
    guard decimals > 0 else { return whole }
    let fraction = String(scaled % scale)
    return whole + "." + String(repeating: "0", count: decimals - fraction.count) + fraction
}

/// `text` with spaces added on the left up to `width` characters; as it
/// is if already that wide.
func rightAligned(_ text: String, width: Int) -> String {
    String(repeating: " ", count: max(0, width - text.count)) + text
}

/// `text` with spaces added on the right up to `width` characters; as it
/// is if already that wide.
func leftAligned(_ text: String, width: Int) -> String {
    text + String(repeating: " ", count: max(0, width - text.count))
}
