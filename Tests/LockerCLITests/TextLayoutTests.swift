@testable import locker
import Testing

/// The numbers the CLI prints in its progress line and `status`.
@Suite("the CLI's number layout")
struct TextLayoutTests {
    @Test("fixed-point numbers as %.Nf prints them away from ties",
          arguments: [
              (0.0, 1, "0.0"), (12.34, 1, "12.3"), (12.36, 1, "12.4"), (0.04, 1, "0.0"),
              (1023.96, 1, "1024.0"), (99.6, 0, "100"), (2.4, 0, "2"), (7.0, 2, "7.00"),
              (0.05, 2, "0.05"), (1.005001, 2, "1.01"), (-1.26, 1, "-1.3"), (-0.04, 1, "0.0"),
              (4096.0, 1, "4096.0"),
          ])
    func fixedPointNumbers(value: Double, decimals: Int, expected: String) {
        #expect(fixedPoint(value, decimals: decimals) == expected)
    }

    @Test("values with no fixed-point form are written as Swift writes them")
    func notFinite() {
        #expect(fixedPoint(.infinity, decimals: 1) == "inf")
        #expect(fixedPoint(.nan, decimals: 1) == "nan")
        #expect(fixedPoint(1e300, decimals: 1) == "1e+300")
    }

    @Test("columns are padded to their width and never cut")
    func columns() {
        #expect(rightAligned("7", width: 3) == "  7")
        #expect(rightAligned("100", width: 3) == "100")
        #expect(rightAligned("1000", width: 3) == "1000")
        #expect(leftAligned("-", width: 9) == "-        ")
        #expect(leftAligned("default A", width: 9) == "default A")
    }
}
