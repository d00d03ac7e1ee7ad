//! A shard's backup file: its entity rows exactly as stored, in added_id
//! order, gzip-compressed.
//!
//! The rows are copied byte for byte (the stored body, not a decoded and
//! re-encoded one), so a restore puts back exactly what was there, damaged
//! cells included, and a checksum of the rows read back from the restored
//! shard can be compared with one taken at backup time.
//!
//! Inside the gzip stream: the magic line [`MAGIC`], then one record per
//! row, all integers little-endian:
//!
//! ```text
//! added_id u64 | row_key [16] | column length u8 | column | ref_key i64
//! | created_at i64 | body length u32 | body
//! ```
//!
//! Two digests are kept: the SHA-256 of the file as written (what
//! `backup verify` checks, without decompressing) and the SHA-256 of the
//! records (the *content* digest, what a restore compares with the rows it
//! reads back).

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use sha2::{Digest, Sha256};

use super::BackupError;

/// The first bytes of every backup file (inside the compression).
pub const MAGIC: &[u8; 10] = b"MZBACKUP1\n";

/// The largest body a record may hold: MEDIUMBLOB's limit.
const MAX_BODY: u32 = (1 << 24) - 1;

/// One entity row as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Its position in the shard's change log.
    pub added_id: u64,
    /// The row key's 16 bytes.
    pub row_key: [u8; 16],
    /// The column name.
    pub column: String,
    /// The ref key.
    pub ref_key: i64,
    /// When it was first written, microseconds since the Unix epoch.
    pub created_at: i64,
    /// The body as stored (encoded, maybe compressed).
    pub body: Vec<u8>,
}

impl Record {
    /// Appends the record's bytes.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.added_id.to_le_bytes());
        out.extend_from_slice(&self.row_key);
        // Column names are at most 64 ASCII characters (checked where
        // records are made from rows).
        out.push(self.column.len() as u8);
        out.extend_from_slice(self.column.as_bytes());
        out.extend_from_slice(&self.ref_key.to_le_bytes());
        out.extend_from_slice(&self.created_at.to_le_bytes());
        out.extend_from_slice(&(self.body.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.body);
    }
}

/// The SHA-256 of a sequence of records, and how many there were.
#[derive(Clone, Default)]
pub struct ContentDigest {
    hasher: Sha256,
    cells: u64,
    body_bytes: u64,
    scratch: Vec<u8>,
}

impl ContentDigest {
    /// Adds one record.
    pub fn add(&mut self, record: &Record) {
        self.scratch.clear();
        record.encode(&mut self.scratch);
        self.hasher.update(&self.scratch);
        self.cells += 1;
        self.body_bytes += record.body.len() as u64;
    }

    /// Records added so far.
    pub fn cells(&self) -> u64 {
        self.cells
    }

    /// Body bytes added so far.
    pub fn body_bytes(&self) -> u64 {
        self.body_bytes
    }

    /// The digest, as lowercase hex.
    pub fn finish(self) -> String {
        hex::encode(self.hasher.finalize())
    }
}

/// Writes a backup file, hashing what it writes.
pub struct Writer {
    path: PathBuf,
    encoder: GzEncoder<HashingWriter<BufWriter<File>>>,
    content: ContentDigest,
    last_added_id: u64,
}

/// What a finished file holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    /// Bytes of the file.
    pub file_bytes: u64,
    /// SHA-256 of the file, hex.
    pub file_sha256: String,
    /// SHA-256 of the records, hex.
    pub content_sha256: String,
    /// Records written.
    pub cells: u64,
    /// Body bytes written.
    pub body_bytes: u64,
}

impl Writer {
    /// Creates the file (refusing one that exists) and writes its magic.
    pub fn create(path: &Path) -> Result<Writer, BackupError> {
        let file = File::options()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| BackupError::io(path, e))?;
        let mut encoder = GzEncoder::new(
            HashingWriter {
                inner: BufWriter::new(file),
                hasher: Sha256::new(),
                bytes: 0,
            },
            flate2::Compression::fast(),
        );
        encoder
            .write_all(MAGIC)
            .map_err(|e| BackupError::io(path, e))?;
        Ok(Writer {
            path: path.to_path_buf(),
            encoder,
            content: ContentDigest::default(),
            last_added_id: 0,
        })
    }

    /// Appends one record; records come in increasing added_id order.
    pub fn push(&mut self, record: &Record) -> Result<(), BackupError> {
        debug_assert!(record.added_id > self.last_added_id);
        self.last_added_id = record.added_id;
        self.content.add(record);
        self.encoder
            .write_all(&self.content.scratch)
            .map_err(|e| BackupError::io(&self.path, e))
    }

    /// Finishes the compression and syncs the file to disk.
    pub fn finish(self) -> Result<Written, BackupError> {
        let path = self.path;
        let hashing = self
            .encoder
            .finish()
            .map_err(|e| BackupError::io(&path, e))?;
        let file = hashing
            .inner
            .into_inner()
            .map_err(|e| BackupError::io(&path, e.into_error()))?;
        file.sync_all().map_err(|e| BackupError::io(&path, e))?;
        Ok(Written {
            file_bytes: hashing.bytes,
            file_sha256: hex::encode(hashing.hasher.finalize()),
            content_sha256: self.content.clone().finish(),
            cells: self.content.cells,
            body_bytes: self.content.body_bytes,
        })
    }
}

struct HashingWriter<W> {
    inner: W,
    hasher: Sha256,
    bytes: u64,
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// The SHA-256 and length of a whole file.
pub fn file_digest(path: &Path) -> Result<(String, u64), BackupError> {
    let mut file = File::open(path).map_err(|e| BackupError::io(path, e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut bytes = 0u64;
    loop {
        let n = file.read(&mut buf).map_err(|e| BackupError::io(path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        bytes += n as u64;
    }
    Ok((hex::encode(hasher.finalize()), bytes))
}

/// Reads a backup file's records in order.
pub struct Reader {
    path: PathBuf,
    decoder: BufReader<GzDecoder<BufReader<File>>>,
    last_added_id: u64,
}

impl Reader {
    /// Opens the file and checks its magic.
    pub fn open(path: &Path) -> Result<Reader, BackupError> {
        let file = File::open(path).map_err(|e| BackupError::io(path, e))?;
        let mut reader = Reader {
            path: path.to_path_buf(),
            decoder: BufReader::with_capacity(1 << 16, GzDecoder::new(BufReader::new(file))),
            last_added_id: 0,
        };
        let mut magic = [0u8; MAGIC.len()];
        reader.exact(&mut magic, "the file's header")?;
        if &magic != MAGIC {
            return Err(reader.damaged("it does not start like a Mezzanine backup file"));
        }
        Ok(reader)
    }

    fn damaged(&self, reason: impl Into<String>) -> BackupError {
        BackupError::Damaged {
            path: self.path.clone(),
            reason: reason.into(),
        }
    }

    fn exact(&mut self, buf: &mut [u8], what: &str) -> Result<(), BackupError> {
        self.decoder.read_exact(buf).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => self.damaged(format!("cut short in {what}")),
            _ => self.damaged(format!("reading {what}: {e}")),
        })
    }

    /// The next record, or `None` at the end of the file.
    pub fn next_record(&mut self) -> Result<Option<Record>, BackupError> {
        let mut id = [0u8; 8];
        // End of file is only clean between records.
        match self.decoder.fill_buf() {
            Ok([]) => return Ok(None),
            Ok(_) => {}
            Err(e) => return Err(self.damaged(format!("decompressing: {e}"))),
        }
        self.exact(&mut id, "a record's added_id")?;
        let added_id = u64::from_le_bytes(id);
        if added_id <= self.last_added_id {
            return Err(self.damaged(format!(
                "added_id {added_id} follows {}: records must be in increasing order",
                self.last_added_id
            )));
        }
        self.last_added_id = added_id;
        let mut row_key = [0u8; 16];
        self.exact(&mut row_key, "a row key")?;
        let mut len = [0u8; 1];
        self.exact(&mut len, "a column's length")?;
        let mut column = vec![0u8; len[0] as usize];
        self.exact(&mut column, "a column name")?;
        let column = String::from_utf8(column)
            .ok()
            .filter(|c| !c.is_empty() && c.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
            .ok_or_else(|| self.damaged(format!("added_id {added_id}: not a column name")))?;
        let mut word = [0u8; 8];
        self.exact(&mut word, "a ref key")?;
        let ref_key = i64::from_le_bytes(word);
        self.exact(&mut word, "a created_at")?;
        let created_at = i64::from_le_bytes(word);
        let mut len = [0u8; 4];
        self.exact(&mut len, "a body's length")?;
        let len = u32::from_le_bytes(len);
        if len > MAX_BODY {
            return Err(self.damaged(format!(
                "added_id {added_id}: a body of {len} bytes is longer than any stored body"
            )));
        }
        let mut body = vec![0u8; len as usize];
        self.exact(&mut body, "a body")?;
        Ok(Some(Record {
            added_id,
            row_key,
            column,
            ref_key,
            created_at,
            body,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(added_id: u64, body: &[u8]) -> Record {
        Record {
            added_id,
            row_key: [7; 16],
            column: "BASE".into(),
            ref_key: -3,
            created_at: 1_700_000_000_000_000,
            body: body.to_vec(),
        }
    }

    fn write(dir: &Path, records: &[Record]) -> (PathBuf, Written) {
        let path = dir.join("shard.cells.gz");
        let mut writer = Writer::create(&path).unwrap();
        for r in records {
            writer.push(r).unwrap();
        }
        (path, writer.finish().unwrap())
    }

    fn read_all(path: &Path) -> Result<Vec<Record>, BackupError> {
        let mut reader = Reader::open(path)?;
        let mut out = Vec::new();
        while let Some(r) = reader.next_record()? {
            out.push(r);
        }
        Ok(out)
    }

    #[test]
    fn records_come_back_exactly_with_matching_digests() {
        let dir = tempfile::tempdir().unwrap();
        let records = vec![
            record(1, b""),
            record(5, &[0, 255, 10, 13]),
            record(6, &[1; 5000]),
        ];
        let (path, written) = write(dir.path(), &records);
        assert_eq!(read_all(&path).unwrap(), records);
        assert_eq!(written.cells, 3);
        assert_eq!(written.body_bytes, 5004);
        let (sha, bytes) = file_digest(&path).unwrap();
        assert_eq!(
            (sha, bytes),
            (written.file_sha256.clone(), written.file_bytes)
        );
        let mut digest = ContentDigest::default();
        records.iter().for_each(|r| digest.add(r));
        assert_eq!(digest.finish(), written.content_sha256);
    }

    #[test]
    fn an_existing_file_is_never_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let (path, _) = write(dir.path(), &[record(1, b"x")]);
        assert!(matches!(Writer::create(&path), Err(BackupError::Io { .. })));
        assert_eq!(read_all(&path).unwrap().len(), 1);
    }

    #[test]
    fn a_cut_or_foreign_file_is_damaged_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let (path, _) = write(dir.path(), &[record(1, b"abc"), record(2, b"def")]);
        let bytes = std::fs::read(&path).unwrap();
        let cut = dir.path().join("cut.gz");
        std::fs::write(&cut, &bytes[..bytes.len() - 12]).unwrap();
        assert!(matches!(read_all(&cut), Err(BackupError::Damaged { .. })));
        let foreign = dir.path().join("foreign.gz");
        let mut e = GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(b"not a backup at all").unwrap();
        std::fs::write(&foreign, e.finish().unwrap()).unwrap();
        assert!(matches!(
            read_all(&foreign),
            Err(BackupError::Damaged { .. })
        ));
        let plain = dir.path().join("plain.gz");
        std::fs::write(&plain, b"plain text").unwrap();
        assert!(matches!(read_all(&plain), Err(BackupError::Damaged { .. })));
    }

    #[test]
    fn records_out_of_order_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.gz");
        let mut e = GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let mut bytes = MAGIC.to_vec();
        record(4, b"a").encode(&mut bytes);
        record(4, b"b").encode(&mut bytes);
        e.write_all(&bytes).unwrap();
        std::fs::write(&path, e.finish().unwrap()).unwrap();
        let err = read_all(&path).unwrap_err().to_string();
        assert!(err.contains("increasing order"), "{err}");
    }
}
