# ruby processes.rb <redis-url>: lists Sidekiq::ProcessSet (as the Web UI's
# Busy page does) and prints one JSON array of the processes' attributes.
require_relative 'common'

procs = Sidekiq::ProcessSet.new.map do |p|
  {
    'identity' => p.identity,
    'hostname' => p['hostname'],
    'pid' => p['pid'],
    'concurrency' => p['concurrency'],
    'queues' => p.queues,
    'busy' => p['busy'],
    'beat' => p['beat'],
    'quiet' => p['quiet'],
    'stopping' => p.stopping?,
    'started_at' => p['started_at'],
    'tag' => p.tag,
    'labels' => p.labels,
    'version' => p['version']
  }
end
puts JSON.generate(procs)
