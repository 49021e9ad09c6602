"""Reading raw RFC 5322 bytes into a ParsedMessage, leniently, whatever real mail gets wrong.

By job: `message` (parse_message: the MIME walk, bodies, attachments, the content hash), `headers` (encoded
words, addresses, message ids, dates, MIME parameters, normalize_subject), `charsets` (bytes to text),
`html_text` (html_to_text) and `whitespace`. Import from the module that does the job.
"""
