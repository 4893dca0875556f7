package ledger

import "fmt"

// Each calls fn with every record of the files, in chain order, with its file and line number.
// Like Sum it reads records without verifying them (run Verify for that); set-aside files and
// a torn last line are skipped (torn counts the latter). A line that is not a record is an
// error that names it, and so is fn's error.
func Each(files []string, fn func(file string, line int, r Record) error) (torn int, err error) {
	chain, _ := Order(files)
	for _, name := range chain {
		err := scanFile(name, func(line []byte, n int, _ int64, whole bool) error {
			if !whole {
				torn++
				return nil
			}
			r, err := decodeLine(line)
			if err != nil {
				return fmt.Errorf("ledger: %s:%d: not a record: %w", name, n, err)
			}
			return fn(name, n, r)
		})
		if err != nil {
			return torn, err
		}
	}
	return torn, nil
}
