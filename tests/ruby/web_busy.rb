# ruby web_busy.rb <redis-url>: renders the Sidekiq Web UI's Busy page
# (Sidekiq::Web under Rack::MockRequest, no server) and prints its HTTP status
# and the process identities shown on it.
require_relative 'common'
require 'sidekiq/web'
require 'rack/mock'

response = Rack::MockRequest.new(Sidekiq::Web.new).get('/busy', 'rack.session' => {})
identities = Sidekiq::ProcessSet.new.map(&:identity).select { |id| response.body.include?(id) }
$stderr.puts(response.body) unless response.status == 200
puts JSON.generate('status' => response.status, 'identities' => identities)
