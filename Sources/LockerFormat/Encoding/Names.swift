extension String {
    /// Whether the two are the same bytes (UTF-8). Names in the store are
    /// bytes: two names that differ only in Unicode normalization ("é" as
    /// one code point, or as "e" and a combining accent) are two entries,
    /// so a name must be compared this way, never with `==`, which is
    /// true for canonically equivalent strings. Otherwise a header or
    /// record bound to one name would be taken at the other's place.
    public func sameBytes(as other: String) -> Bool {
        utf8.elementsEqual(other.utf8)
    }
}
