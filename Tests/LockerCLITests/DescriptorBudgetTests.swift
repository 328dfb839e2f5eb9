@testable import locker
import LockerStore
import Testing

/// `put -r`'s share of the descriptor limit (`Put.descriptorBudget`):
/// what two batches at once may open never takes the descriptors kept
/// for the rest of the process, and the files prepared ahead are given up
/// before the batches shrink below 64 data files each.
@Suite("put -r's descriptor budget")
struct DescriptorBudgetTests {
    @Test("two batches, and the files prepared ahead, fit under every limit with the kept descriptors to spare")
    func budgetFitsUnderTheLimit() {
        let prepared = 2 * ReadAheadWindow.preparedAhead
        // The limits where each rule fails, so that one broken rule is
        // one failure, not thousands.
        var over: [Int] = [], outOfRange: [Int] = [], preparedTooSoon: [Int] = [], leftUnused: [Int] = []
        for limit in Put.descriptorsKept + 2...8192 {
            let budget = Put.descriptorBudget(limit: limit)
            let used = 2 * budget.dataFilesPerBatch + (budget.preparesSources ? prepared : 0)
            if used + Put.descriptorsKept > limit { over.append(limit) }
            if !(1...Put.maxDataFilesPerBatch).contains(budget.dataFilesPerBatch) { outOfRange.append(limit) }
            if budget.preparesSources && budget.dataFilesPerBatch < 64 { preparedTooSoon.append(limit) }
            // Nothing is left unused that could have given another data
            // file to each batch.
            if budget.dataFilesPerBatch < Put.maxDataFilesPerBatch && used + 2 + Put.descriptorsKept <= limit {
                leftUnused.append(limit)
            }
        }
        #expect(over.count == 0, "more descriptors than the limit leaves, at limits \(over.prefix(5))…")
        #expect(outOfRange.count == 0, "data files a batch out of range at limits \(outOfRange.prefix(5))…")
        #expect(preparedTooSoon.count == 0, "prepares with fewer than 64 data files a batch at limits \(preparedTooSoon.prefix(5))…")
        #expect(leftUnused.count == 0, "room for more data files left unused at limits \(leftUnused.prefix(5))…")
    }

    @Test("preparing starts where the limit leaves 64 data files a batch beside it")
    func preparingNeedsRoom() {
        let threshold = Put.descriptorsKept + 2 * ReadAheadWindow.preparedAhead + 2 * 64
        #expect(!Put.descriptorBudget(limit: threshold - 1).preparesSources)
        #expect(Put.descriptorBudget(limit: threshold) == (64, true))
        // Debian's default soft limit, 1024, prepares.
        #expect(Put.descriptorBudget(limit: 1024).preparesSources)
    }

    @Test("the limit `put -r` asks for gives it everything, with room to spare")
    func wantedLimitGivesEverything() {
        let everything = Put.descriptorsKept + 2 * Put.maxDataFilesPerBatch + 2 * ReadAheadWindow.preparedAhead
        #expect(Put.descriptorBudget(limit: everything) == (Put.maxDataFilesPerBatch, true))
        #expect(Put.descriptorBudget(limit: everything - 1).dataFilesPerBatch < Put.maxDataFilesPerBatch)
        #expect(Put.descriptorsWanted >= everything)
        #expect(Put.descriptorBudget(limit: Put.descriptorsWanted) == (Put.maxDataFilesPerBatch, true))
    }

    @Test("under a limit too small for anything, one data file a batch and nothing prepared")
    func tinyLimit() {
        for limit in [0, 16, Put.descriptorsKept] {
            #expect(Put.descriptorBudget(limit: limit) == (1, false))
        }
    }
}
