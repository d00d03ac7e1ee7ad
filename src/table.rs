//! Tables as the commands print them: aligned columns under an upper-case
//! header, no borders, so a table reads in a terminal and greps in a log.
//! Built on `comfy-table`, which measures each column's widest cell
//! (wide characters included) instead of a fixed width guessed per command.

use comfy_table::{CellAlignment, TableStyle};

/// A table being filled, then printed.
pub(crate) struct Table {
    table: comfy_table::Table,
}

impl Table {
    /// A table with `header`; every column left-aligned until
    /// [`Table::right`] says otherwise.
    pub(crate) fn new(header: &[&str]) -> Table {
        let mut table = comfy_table::Table::new();
        table
            .load_style(TableStyle::new())
            .set_header(header.to_vec());
        for column in table.column_iter_mut() {
            column.set_padding((0, 2));
        }
        Table { table }
    }

    /// Right-aligns the numeric columns at `columns` (0-based).
    pub(crate) fn right(mut self, columns: &[usize]) -> Table {
        for &i in columns {
            if let Some(column) = self.table.column_mut(i) {
                column.set_cell_alignment(CellAlignment::Right);
            }
        }
        self
    }

    /// Adds a row, one cell per column.
    pub(crate) fn row<I, T>(&mut self, cells: I)
    where
        I: IntoIterator<Item = T>,
        T: ToString,
    {
        self.table
            .add_row(cells.into_iter().map(|c| c.to_string()).collect::<Vec<_>>());
    }

    /// The table's lines, each after `indent`, without trailing spaces.
    pub(crate) fn render(&self, indent: &str) -> String {
        let mut out = String::new();
        for line in self.table.lines() {
            out.push_str(indent);
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }

    /// Prints the table to stdout.
    pub(crate) fn print(&self, indent: &str) {
        print!("{}", self.render(indent));
    }
}

#[cfg(test)]
mod tests {
    use super::Table;

    #[test]
    fn columns_fit_their_widest_cell_and_numbers_align_right() {
        let mut table = Table::new(&["SHARD", "OWNER"]).right(&[0]);
        table.row(["7", "runner-a@host"]);
        table.row(["1234567", "-"]);
        assert_eq!(
            table.render("  "),
            "    SHARD  OWNER\n        7  runner-a@host\n  1234567  -\n"
        );
    }
}
