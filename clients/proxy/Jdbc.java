import java.net.URI;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.sql.Statement;
import java.sql.Types;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.UUID;

/**
 * The proxy's tests for JDBC (pgjdbc, Debian's libpostgresql-jdbc-java),
 * one source file run by java's source launcher:
 *
 *     java -cp postgresql.jar Jdbc.java served postgres://user@host:port/db "SELECT ... WHERE k = $1" KEY...
 *     java -cp postgresql.jar Jdbc.java writes postgres://user@host:port/db KEY "INSERT ... $1 ..." ...
 *     java -cp postgresql.jar Jdbc.java batch postgres://user@host:port/db "INSERT ... $1 ..." KEY...
 *     java -cp postgresql.jar Jdbc.java statements postgres://user@host:port/db "INSERT ... $1 ..." KEY...
 *     java -cp postgresql.jar Jdbc.java keys postgres://user@host:port/db "INSERT ... $1 ..." KEY...
 *
 * Each statement has one parameter, $1 (written as JDBC's ?), the row
 * key. Run straight against PostgreSQL and through the proxy; the tests
 * compare the outputs (tests/it/proxy_modes.rs, proxy_writes.rs). A value
 * is printed as getString gives it with the class getObject gives, so a
 * type or format the proxy got wrong shows.
 */
public class Jdbc {
    public static void main(String[] args) throws Exception {
        List<String> out = new ArrayList<>();
        switch (args[0]) {
            case "served" -> served(args[1], args[2].replace("$1", "?"), args, 3, out);
            case "writes" -> writes(args[1], args[2], args, 3, out);
            case "batch" -> batch(args[1], args[2], args, 3, out);
            case "statements" -> statements(args[1], args[2], args, 3, out);
            case "keys" -> keys(args[1], args[2], args, 3, out);
            default -> throw new IllegalArgumentException(
                "served, writes, batch, statements or keys, not " + args[0]);
        }
        System.out.println(String.join("\n", out));
    }

    /**
     * Reads: for each key, on three connections (the driver's defaults:
     * unnamed statements for the first executions, then a named one with
     * binary results from the fifth, so each key is read six times;
     * prepareThreshold=-1, named and binary from the first;
     * preferQueryMode=simple, the key inlined in a simple Query), the key
     * bound first with setString: a varchar, which PostgreSQL refuses to
     * compare with a uuid (42883), an error that must reach the app as it
     * does directly with the session going on (and its reads still
     * served); then as a java.util.UUID (binary) and as a string of
     * unspecified type (text). Each result's line starts
     * with its key and ends with its rows; an error's starts with spaces.
     */
    static void served(String url, String sql, String[] keys, int from, List<String> out)
            throws Exception {
        String[][] connections = {
            {"default", ""},
            {"named", "prepareThreshold=-1"},
            {"simple", "preferQueryMode=simple"},
        };
        for (String[] connection : connections) {
            try (Connection conn = connect(url, connection[1])) {
                try (Statement set = conn.createStatement()) {
                    set.execute("SET TimeZone = 'UTC'");
                }
                try (PreparedStatement ps = conn.prepareStatement(sql)) {
                    for (int k = from; k < keys.length; k++) {
                        String key = keys[k];
                        String label = key + " " + connection[0];
                        // First: the reads after it must be served too.
                        ps.setString(1, key);
                        query(ps, "  " + connection[0] + " setString", out);
                        for (int run = 1; run <= 6; run++) {
                            ps.setObject(1, UUID.fromString(key));
                            query(ps, label + " uuid run " + run, out);
                        }
                        ps.setObject(1, key, Types.OTHER);
                        query(ps, label + " unspecified", out);
                    }
                }
            }
        }
    }

    /**
     * Writes: the first statement with the key bound by setString, then
     * each statement prepared and run once, in order, the key
     * alternately a string of unspecified type (text) and a
     * java.util.UUID (binary); its update count, or its rows and
     * columns, or its SQLSTATE, with the key written as KEY.
     */
    static void writes(String url, String key, String[] statements, int from, List<String> out)
            throws Exception {
        try (Connection conn = connect(url, "")) {
            try (Statement set = conn.createStatement()) {
                set.execute("SET TimeZone = 'Europe/Lisbon'");
            }
            // First the first statement with the key bound by setString, a
            // varchar PostgreSQL will not take for a uuid (its Parse
            // fails): the writes after it must still run as they would.
            try (PreparedStatement ps = conn.prepareStatement(statements[from].replace("$1", "?"))) {
                ps.setString(1, key);
                ps.execute();
                out.add("setString: ran");
            } catch (SQLException e) {
                out.add("setString: " + error(e));
            }
            for (int i = from; i < statements.length; i++) {
                int n = i - from;
                String sql = statements[i].replace("$1", "?");
                String line;
                try (PreparedStatement ps = conn.prepareStatement(sql)) {
                    if (n % 2 == 1) {
                        ps.setObject(1, UUID.fromString(key));
                    } else {
                        ps.setObject(1, key, Types.OTHER);
                    }
                    if (ps.execute()) {
                        try (ResultSet rs = ps.getResultSet()) {
                            line = "rows " + rows(rs) + " columns " + columns(rs);
                        }
                    } else {
                        line = "count " + ps.getUpdateCount();
                    }
                } catch (SQLException e) {
                    line = error(e);
                }
                out.add((n + ": " + line).replace(key, "KEY"));
            }
        }
    }

    /**
     * A batch: the statement added once per key (a java.util.UUID) and
     * run with executeBatch, in autocommit: pgjdbc pipelines the batch
     * with one Sync, so PostgreSQL runs it in one implicit transaction.
     * Its update counts, or the SQLSTATE of the first error.
     */
    static void batch(String url, String sql, String[] keys, int from, List<String> out)
            throws Exception {
        try (Connection conn = connect(url, "");
             PreparedStatement ps = conn.prepareStatement(sql.replace("$1", "?"))) {
            for (int k = from; k < keys.length; k++) {
                ps.setObject(1, UUID.fromString(keys[k]));
                ps.addBatch();
            }
            out.add("counts " + java.util.Arrays.toString(ps.executeBatch()));
        } catch (SQLException e) {
            SQLException first = e.getNextException() == null ? e : e.getNextException();
            out.add(error(first));
        }
    }

    /**
     * A batch of SQL text: the statement with each key written in as a
     * literal, added with Statement.addBatch and run with executeBatch,
     * in autocommit. pgjdbc sends each statement with its own Parse, and
     * one Sync for the batch. Its update counts, or the SQLSTATE of the
     * first error.
     */
    static void statements(String url, String sql, String[] keys, int from, List<String> out)
            throws Exception {
        try (Connection conn = connect(url, "");
             Statement st = conn.createStatement()) {
            for (int k = from; k < keys.length; k++) {
                st.addBatch(sql.replace("$1", "'" + keys[k] + "'"));
            }
            out.add("counts " + java.util.Arrays.toString(st.executeBatch()));
        } catch (SQLException e) {
            SQLException first = e.getNextException() == null ? e : e.getNextException();
            out.add(error(first));
        }
    }

    /**
     * Generated keys, as Spring's KeyHolder asks for them: for each key,
     * the statement prepared with RETURN_GENERATED_KEYS (pgjdbc appends
     * RETURNING *), run, and its generated keys read. The update count,
     * the keys' rows (the first column, the integer id, each row its own,
     * shown as ID when it is a positive Long) and their columns, or the
     * SQLSTATE of an error.
     */
    static void keys(String url, String sql, String[] keys, int from, List<String> out)
            throws Exception {
        try (Connection conn = connect(url, "")) {
            for (int k = from; k < keys.length; k++) {
                String line;
                try (PreparedStatement ps = conn.prepareStatement(
                        sql.replace("$1", "?"), Statement.RETURN_GENERATED_KEYS)) {
                    ps.setObject(1, UUID.fromString(keys[k]));
                    int count = ps.executeUpdate();
                    try (ResultSet rs = ps.getGeneratedKeys()) {
                        String columns = columns(rs);
                        int n = rs.getMetaData().getColumnCount();
                        List<String> rows = new ArrayList<>();
                        while (rs.next()) {
                            List<String> row = new ArrayList<>();
                            for (int i = 1; i <= n; i++) {
                                boolean id = i == 1 && rs.getObject(i) instanceof Long v && v > 0;
                                row.add(id ? "ID (Long)" : shown(rs, i));
                            }
                            rows.add(row.toString());
                        }
                        line = "count " + count + " keys " + rows + " columns " + columns;
                    }
                } catch (SQLException e) {
                    line = error(e);
                }
                out.add(line.replace(keys[k], "KEY"));
            }
        }
    }

    /**
     * A prepared read's lines: "label: [rows]" and its columns, or
     * "label: error SQLSTATE".
     */
    static void query(PreparedStatement ps, String label, List<String> out) {
        try (ResultSet rs = ps.executeQuery()) {
            String columns = columns(rs);
            out.add(label + ": " + rows(rs));
            out.add("  columns " + columns);
        } catch (SQLException e) {
            out.add(label + ": " + error(e));
        }
    }

    /**
     * A connection to {@code url} (postgres://user[:password]@host:port/db)
     * with the driver's {@code options} ("key=value&...").
     */
    static Connection connect(String url, String options) throws Exception {
        URI uri = URI.create(url);
        Properties props = new Properties();
        String[] user = (uri.getUserInfo() == null ? "postgres" : uri.getUserInfo()).split(":", 2);
        props.setProperty("user", user[0]);
        if (user.length == 2) {
            props.setProperty("password", user[1]);
        }
        String jdbc = "jdbc:postgresql://" + uri.getHost() + ":" + uri.getPort() + uri.getPath();
        return DriverManager.getConnection(options.isEmpty() ? jdbc : jdbc + "?" + options, props);
    }

    /** Each row as [value (Class), ...], NULL as NULL. */
    static List<String> rows(ResultSet rs) throws SQLException {
        int n = rs.getMetaData().getColumnCount();
        List<String> rows = new ArrayList<>();
        while (rs.next()) {
            List<String> row = new ArrayList<>();
            for (int i = 1; i <= n; i++) {
                row.add(shown(rs, i));
            }
            rows.add(row.toString());
        }
        return rows;
    }

    /** Column {@code i} of the current row as "value (Class)", NULL as NULL. */
    static String shown(ResultSet rs, int i) throws SQLException {
        Object value = rs.getObject(i);
        return value == null
            ? "NULL"
            : rs.getString(i) + " (" + value.getClass().getSimpleName() + ")";
    }

    /** The columns: label and type name. */
    static String columns(ResultSet rs) throws SQLException {
        ResultSetMetaData meta = rs.getMetaData();
        List<String> columns = new ArrayList<>();
        for (int i = 1; i <= meta.getColumnCount(); i++) {
            columns.add(meta.getColumnLabel(i) + " " + meta.getColumnTypeName(i));
        }
        return columns.toString();
    }

    /** An error as the app tells it apart: its SQLSTATE. */
    static String error(SQLException e) {
        return "error " + e.getSQLState();
    }
}
