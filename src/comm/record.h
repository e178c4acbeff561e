/* Internal: the rendezvous file, as blob_comm_create and blob-launch (which recognises a
 * record before it removes one) see it. Never installed. */
#ifndef BLOB_RECORD_H
#define BLOB_RECORD_H

/* The first bytes of a record (blob_comm_id_encode). */
#define BLOB__RECORD_MAGIC     "blobcomm"
#define BLOB__RECORD_MAGIC_LEN (sizeof BLOB__RECORD_MAGIC - 1)

/* Remove the file at the end of path's symbolic links (the one blob_comm_id_write_file
 * wrote), if there is one. */
void blob__comm_id_remove_file(const char *path);

#endif
