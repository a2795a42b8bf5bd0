-- Append one batch of an imported file's hits and record how far the import
-- got, in one step: the hits and the progress are written together or not
-- at all, so an import killed at any point and run again counts every line
-- once.
--
-- KEYS[1] stream   KEYS[2] the file's progress (same hash slot)
-- ARGV[1] the progress this batch starts from ("0:0" for a file's start)
-- ARGV[2] the progress after it ("BYTES:LINES:SHA1", the SHA-1 of those
--         bytes; "BYTES:LINES" from an earlier version)   ARGV[3] TTL of KEYS[2] in s
--         (0: none, the key is kept)
-- ARGV[4..] MessagePack hit events
--
-- Nothing may fail once the first hit is appended (a script's writes are not
-- undone by a later error): a stream key of another type fails the XLEN
-- first, and the worker gives a TTL Redis accepts.
--
-- A batch that does not start where the file's recorded progress stands
-- (another import of the same file went on, or an earlier batch of the
-- same pipeline failed) appends nothing. Returns the progress recorded
-- after the call: ARGV[2] when the batch was appended.

local at = redis.call('GET', KEYS[2]) or '0:0'
if at ~= ARGV[1] then
    return at
end
redis.call('XLEN', KEYS[1])
for i = 4, #ARGV do
    redis.call('XADD', KEYS[1], '*', 'hit', ARGV[i])
end
if ARGV[3] == '0' then
    redis.call('SET', KEYS[2], ARGV[2])
else
    redis.call('SET', KEYS[2], ARGV[2], 'EX', ARGV[3])
end
return ARGV[2]
